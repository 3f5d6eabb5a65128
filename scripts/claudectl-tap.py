#!/usr/bin/env python3
"""A loopback TCP forwarder that records every line it carries, for
scripts/claudectl-interop.sh: agent-hub's relay dials this tap, the tap dials claudectl's
`relay serve`, and each complete line in either direction is appended to LOG as one JSON
object {"conn": N, "dir": "to_ctl" | "to_hub", "line": "..."}. A v0 link is plain JSON lines,
so this shows exactly what reached claudectl's lasting link (its own output names only the
message type). Bytes are forwarded unchanged, partial lines included.

    claudectl-tap.py LISTEN_HOST UPSTREAM_HOST UPSTREAM_PORT LOG

Prints "tap on HOST:PORT" once listening (port 0: the kernel picks one)."""
import json
import socket
import sys
import threading

listen_host, up_host, up_port, log_path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
lock = threading.Lock()
log = open(log_path, "a", buffering=1)


def record(conn, direction, line):
    with lock:
        log.write(json.dumps({"conn": conn, "dir": direction,
                              "line": line.decode("utf-8", "replace")}) + "\n")


def pump(conn, direction, src, dst):
    buf = b""
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                record(conn, direction, line)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def main():
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((listen_host, 0))
    srv.listen(16)
    print("tap on %s:%d" % srv.getsockname(), flush=True)
    n = 0
    while True:
        down, _ = srv.accept()
        n += 1
        with lock:
            log.write(json.dumps({"conn": n, "dir": "open", "line": ""}) + "\n")
        try:
            up = socket.create_connection((up_host, up_port), timeout=10)
            up.settimeout(None)
        except OSError:
            down.close()
            continue
        threading.Thread(target=pump, args=(n, "to_ctl", down, up), daemon=True).start()
        threading.Thread(target=pump, args=(n, "to_hub", up, down), daemon=True).start()


main()
