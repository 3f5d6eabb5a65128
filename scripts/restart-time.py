#!/usr/bin/env python3
"""Times one restart of a hub over a store the scale bench wrote (docs/performance.md,
"Restart"): exec -> the answer to a `hello` and a
`status` of the last envelope, as `agent-hub-bench --scale` part (a) measures it, with the
hub's CPU time and RSS at that answer. It exists to run two builds back to back on one copy
of the store, so both see the same machine load.

Usage: restart-time.py SERVER DIR [LAST_ID]
  DIR is a copy of the bench's `scale-1-restart` directory (config.toml, roster.toml with
  `scale-sender`, queue.db); LAST_ID defaults to r-999999 (the last of a million).
The hub is stopped with SIGTERM afterwards, and the time it took to exit is printed."""
import json
import os
import re
import socket
import subprocess
import sys
import time


def main():
    server, d = sys.argv[1], sys.argv[2]
    last = sys.argv[3] if len(sys.argv) > 3 else "r-999999"
    roster = open(os.path.join(d, "roster.toml")).read()
    token = re.search(r'^scale-sender\s*=\s*"([^"]+)"', roster, re.M).group(1)
    log = os.path.join(d, "service.log")
    seen = os.path.getsize(log) if os.path.exists(log) else 0
    t0 = time.monotonic()
    hub = subprocess.Popen([server, "--config", "config.toml"], cwd=d,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    port = None
    while port is None:
        if hub.poll() is not None:
            sys.exit(f"the hub exited with {hub.returncode}; see {log}")
        if os.path.exists(log):
            with open(log) as f:
                f.seek(seen)
                m = re.search(r"listener bound 127\.0\.0\.1:(\d+)", f.read())
                port = m and int(m.group(1))
        time.sleep(0.02)
    hello = json.dumps({"hello": {"name": "scale-sender", "token": token}})
    status = json.dumps({"status": {"id": last}})
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port)) as s:
                s.sendall(f"{hello}\n{status}\n".encode())
                buf = b""
                while buf.count(b"\n") < 2:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    buf += chunk
            if buf.count(b"\n") >= 2:
                break
        except OSError:
            pass
        time.sleep(0.02)
    wall = time.monotonic() - t0
    stat = open(f"/proc/{hub.pid}/stat").read().rsplit(")", 1)[1].split()
    cpu = (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
    rss = next(l for l in open(f"/proc/{hub.pid}/status") if l.startswith("VmRSS"))
    answer = buf.decode().splitlines()[-1]
    print(f"wall {wall:.2f} s, hub CPU {cpu:.2f} s, RSS {int(rss.split()[1]) // 1024} MiB; "
          f"answer {answer[:100]}")
    t1 = time.monotonic()
    hub.terminate()
    code = hub.wait(timeout=600)
    print(f"stop (SIGTERM -> exit {code}) {time.monotonic() - t1:.2f} s")


if __name__ == "__main__":
    main()
