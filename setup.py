"""The one C extension, the leader's per-record walk of produced batches
(odradek/storage/log_validator.py); everything else is in pyproject.toml.

`pip install -e .` builds it, with a C compiler and Python's headers (scripts/_venv.sh
installs them on Debian). setup.py rather than pyproject's ext-modules table, which
setuptools still calls experimental and warns about on every install.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "odradek.protocol._record_walker",
    sources=["odradek/protocol/_record_walker.c"],
    extra_compile_args=["-Wall", "-Wextra"],
)])
