"""An Optuna journal file read whole before a tuner writes to it.

Optuna's JournalFileBackend appends each change as one JSON line. A write cut short (a kill mid-write, a full disk, a
copy cut short) leaves a last line without its newline: Optuna reads past it, and its next append is glued onto the
fragment, so that the line in the middle no longer parses and the whole study becomes unreadable (to the tuner, its
--report and optuna-dashboard). check_journal reads the file first: a torn last line, never read by anyone, is dropped
(or given its newline, where it is whole), a fragment glued before a whole entry by such an append is dropped, each said
in one line; any other line that is not a journal entry refuses the file, and nothing is written to it."""

import json
import os
from pathlib import Path


ENTRY = b'{"op_code"'  # how each entry of Optuna's journal begins


class JournalError(Exception):
    """Why a file is no journal a tuner may write to; one line."""


def is_entry(line: bytes):
    try:
        entry = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return False
    return isinstance(entry, dict) and "op_code" in entry


def glued_entry(line: bytes):
    """The whole entry at the end of `line`, where `line` is a torn fragment with an entry appended to it; else None."""
    start = line.rfind(ENTRY)
    return line[start:] if start > 0 and is_entry(line[start:]) else None


def repaired(data: bytes):
    """(the journal's bytes with its torn pieces mended, what was mended as phrases); JournalError at a line that is
    neither an entry nor a fragment with an entry glued on."""
    lines, said = data.split(b"\n"), []
    tail = lines.pop()  # the bytes after the last newline: b"" in a whole journal
    for number, line in enumerate(lines, start=1):
        if is_entry(line):
            continue
        entry = glued_entry(line)
        if entry is None:
            raise JournalError(f"line {number} is not an entry of an Optuna journal")
        said.append(f"dropped the torn fragment before line {number}'s entry ({len(line) - len(entry)} bytes)")
        lines[number - 1] = entry
    if tail and is_entry(tail):
        said.append("gave its last entry the newline its write was cut before")
        lines.append(tail)
    elif tail and lines and (tail.startswith(ENTRY) or ENTRY.startswith(tail)):
        said.append(f"dropped its torn last line ({len(tail)} bytes of a write cut short, never read)")
    elif tail:
        raise JournalError(f"line {len(lines) + 1} is not an entry of an Optuna journal")
    return b"".join(line + b"\n" for line in lines), said


def check_journal(path):
    """Reads the journal at `path` whole (absent or empty: nothing to do) and mends what a cut write left, holding the
    lock Optuna's writers hold, so that no live writer is mid-line; returns what it mended, in one line, or None.
    JournalError, the file untouched, where a line is no journal entry."""
    import optuna

    path = Path(path)
    if not path.is_file() or path.stat().st_size == 0:
        return None
    _, said = repaired(path.read_bytes())  # refused before the lock is taken: a foreign file is not locked at all
    if not said:
        return None
    lock = optuna.storages.journal.JournalFileSymlinkLock(str(path))
    lock.acquire()
    try:
        data, said = repaired(path.read_bytes())  # again: another tuner may have mended it meanwhile
        if said:
            temporary = path.with_name(path.name + ".mended")
            temporary.write_bytes(data)
            os.replace(temporary, path)
    finally:
        lock.release()
    return f"{path}: {'; '.join(said)}; the study is as its workers last read it" if said else None
