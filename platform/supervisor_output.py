"""supervisord event listener (platform/supervisord.conf): every program's output to the terminal, each line
with the program's name in front (``worker | ...``). Not part of the portal's Python packages: stdlib only.

supervisord's listener protocol: say READY on stdout, read a header line and its payload from stdin, answer
RESULT; the lines go to stderr, which supervisord writes to its own stdout (the terminal).
"""

from __future__ import annotations

import sys

WIDTH = 7  # "watcher"


def main() -> None:
    partial: dict[str, bytes] = {}
    stdin, stdout, stderr = sys.stdin.buffer, sys.stdout.buffer, sys.stderr.buffer
    while True:
        stdout.write(b"READY\n")
        stdout.flush()
        header_line = stdin.readline()
        if not header_line:
            return  # supervisord is gone
        header = dict(token.split(b":", 1) for token in header_line.split())
        payload = stdin.read(int(header[b"len"]))
        if header.get(b"eventname", b"").startswith(b"PROCESS_LOG"):
            meta, _, data = payload.partition(b"\n")
            name = dict(token.split(b":", 1) for token in meta.split()).get(b"processname", b"?").decode()
            *lines, rest = (partial.pop(name, b"") + data).split(b"\n")
            if rest:
                partial[name] = rest
            prefix = f"{name:<{WIDTH}} | ".encode()
            stderr.write(b"".join(prefix + line + b"\n" for line in lines))
            stderr.flush()
        stdout.write(b"RESULT 2\nOK")
        stdout.flush()


if __name__ == "__main__":
    main()
