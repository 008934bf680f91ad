# Sourced by scripts/start and scripts/test: makes .venv with a Python 3.11+ and sets $VENV.
# On a fresh Debian machine, python3 lacks venv support until python3-venv is installed.
set -euo pipefail
PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "Odradek needs Python 3.11 or newer as \$PYTHON (found: $("$PYTHON" --version 2>&1))" >&2
  exit 1
fi
VENV=${VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  if ! "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null; then
    echo "installing python3-venv (Debian)" >&2
    source "$(dirname "${BASH_SOURCE[0]}")/_debian.sh"
    debian_install python3-venv
  fi
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
fi
# `pip install -e .` compiles odradek/protocol/_record_walker.c: it needs a C compiler and
# $PYTHON's headers, which Debian's python3 keeps in python3-dev.
if ! command -v cc >/dev/null 2>&1 || ! "$PYTHON" -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then
  source "$(dirname "${BASH_SOURCE[0]}")/_debian.sh"
  debian_install gcc libc6-dev python3-dev
fi
