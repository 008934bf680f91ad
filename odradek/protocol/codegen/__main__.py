"""`python -m odradek.protocol.codegen [--check]`: regenerate the protocol code.

With --check nothing is written: the command fails if regenerating would change any
generated file, which is how CI keeps the committed code true to the specs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from odradek.protocol.codegen.emit_message import HEADER, MessageEmitter, module_name
from odradek.protocol.codegen.emit_tables import emit_api_keys, emit_errors
from odradek.protocol.codegen.spec import load_all

PROTOCOL = Path(__file__).resolve().parent.parent
SPECS = PROTOCOL / "specs"


def generate() -> dict[Path, str]:
    """Every generated file, by path, as it should read."""
    specs = load_all(SPECS / "message")
    files = {
        PROTOCOL / "messages" / f"{module_name(spec)}.py": MessageEmitter(spec).emit()
        for spec in specs
    }
    files[PROTOCOL / "messages" / "__init__.py"] = (
        HEADER.format(source="message/*.json")
        + '\n"""One module per Kafka JSON message spec; see odradek.protocol.api_keys."""\n'
    )
    files[PROTOCOL / "api_keys.py"] = emit_api_keys(specs)
    files[PROTOCOL / "errors.py"] = emit_errors(SPECS / "errors.tsv")
    return files


def stale_files(files: dict[Path, str]) -> list[Path]:
    """Generated files that differ from what is on disk, or are on disk but no longer made."""
    stale = [p for p, text in files.items() if not p.exists() or p.read_text() != text]
    stale += [p for p in (PROTOCOL / "messages").glob("*.py") if p not in files]
    return sorted(stale)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m odradek.protocol.codegen")
    parser.add_argument("--check", action="store_true", help="fail if regenerating changes files")
    args = parser.parse_args(argv)
    files = generate()
    if args.check:
        stale = stale_files(files)
        for path in stale:
            print(f"stale generated file: {path.relative_to(PROTOCOL.parent.parent)}")
        return 1 if stale else 0
    for path in stale_files(files):
        if path not in files:
            path.unlink()
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    print(f"generated {len(files)} files under {PROTOCOL}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
