#!/usr/bin/env python3
"""A loopback TCP forwarder that records every relay message it carries, for
scripts/claudectl-interop.sh. Bytes are forwarded unchanged (partial messages included);
each complete message in either direction is appended to LOG as one JSON object:

    {"conn": N, "tap": LABEL, "dir": "to_ctl" | "to_hub", "kind": "line" | "frame",
     "line": <the message's JSON text>, "hex": <its wire bytes, hex>,
     "compressed": bool, "raw_len": int | null}

Framing (shared/design/relay-compat*.md): JSON lines until the handshake_ack; after an ack
whose payload has an integer `proto` and `frame-bin` in `features`, both directions carry
binary frames from the byte after the ack line: `len` u32 BE (flags + body), `flags` u8,
body; flags bit 0: body = `raw_len` u32 LE + one LZ4 block, decompressed here (pure Python)
so `line` is always the JSON. A line's `hex` includes its `\\n`; a frame's is the whole
frame. Other records, keyed by "dir":
    "accept"  a connection arrived (before any byte);
    "open"    the dialler's handshake: "from_peer", "version", "proto", "features",
              "transient" (true only for a JSON `true`), "listen_port";
    "ack"     the handshake_ack: "status", "proto", "features", "binary" (frames from now);
    "error"   a message that could not be parsed (then that direction is no longer parsed);
    "close"   both directions ended.

    claudectl-tap.py [--label L] [--conn-base N] [--dialer hub|ctl]
                     LISTEN_HOST UPSTREAM_HOST UPSTREAM_PORT LOG

--dialer says who dials this tap: `hub` (default; agent-hub's relay dials it, the upstream
is claudectl's serve: bytes from the dialler go "to_ctl") or `ctl` (claudectl dials it, the
upstream is agent-hub's relay listener: bytes from the dialler go "to_hub"). --label names
this tap in every record and --conn-base offsets its connection numbers (the first is N+1),
so two taps can share one LOG. Prints "tap on HOST:PORT" once listening (the kernel picks
the port)."""
import argparse
import json
import os
import socket
import struct
import threading

LINE_CAP = 1048576
FRAME_CAP = 1048576
RAW_CAP = 4 * 1048576


class LZ4Error(ValueError):
    pass


def lz4_block_decompress(src, raw_len):
    """Decompresses one LZ4 block (the block format, no frame header) that must expand to
    exactly raw_len bytes."""
    src = bytes(src)
    n = len(src)
    dst = bytearray()
    i = 0
    while True:
        if i >= n:
            raise LZ4Error("block ends before its last sequence")
        token = src[i]
        i += 1
        lit = token >> 4
        if lit == 15:
            while True:
                if i >= n:
                    raise LZ4Error("literal length runs past the block")
                b = src[i]
                i += 1
                lit += b
                if b != 255:
                    break
        if i + lit > n:
            raise LZ4Error("literals run past the block")
        dst += src[i:i + lit]
        i += lit
        if i == n:
            break  # the last sequence has literals only
        if i + 2 > n:
            raise LZ4Error("truncated match offset")
        offset = src[i] | (src[i + 1] << 8)
        i += 2
        if offset == 0 or offset > len(dst):
            raise LZ4Error("match offset %d outside the %d bytes so far" % (offset, len(dst)))
        ml = token & 15
        if ml == 15:
            while True:
                if i >= n:
                    raise LZ4Error("match length runs past the block")
                b = src[i]
                i += 1
                ml += b
                if b != 255:
                    break
        ml += 4
        start = len(dst) - offset
        if offset >= ml:
            dst += dst[start:start + ml]
        else:  # overlapping copy: the pattern repeats
            while ml > 0:
                chunk = dst[start:start + min(offset, ml)]
                dst += chunk
                ml -= len(chunk)
                start += len(chunk)
        if len(dst) > raw_len:
            raise LZ4Error("block expands past raw_len %d" % raw_len)
    if len(dst) != raw_len:
        raise LZ4Error("block expands to %d bytes, raw_len says %d" % (len(dst), raw_len))
    return bytes(dst)


class Log:
    """One record per write(2) on an O_APPEND file: two taps may share it."""

    def __init__(self, path, label):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.label = label
        self.lock = threading.Lock()

    def write(self, rec):
        if self.label is not None:
            rec = dict(rec, tap=self.label)
        data = (json.dumps(rec) + "\n").encode()
        with self.lock:
            os.write(self.fd, data)


class Conn:
    def __init__(self, n, log):
        self.n = n
        self.log = log
        self.binary = False  # frames from the byte after the ack line, both directions
        self.lock = threading.Lock()
        self.ended = 0


class Parser:
    """Splits one direction's bytes into messages and records them."""

    def __init__(self, conn, direction):
        self.conn = conn
        self.dir = direction
        self.buf = bytearray()
        self.dead = False

    def record(self, **kw):
        rec = {"conn": self.conn.n, "dir": self.dir}
        rec.update(kw)
        self.conn.log.write(rec)

    def error(self, why):
        self.dead = True
        self.conn.log.write({"conn": self.conn.n, "dir": "error", "from": self.dir,
                             "error": why, "hex": bytes(self.buf[:256]).hex()})
        self.buf = bytearray()

    def feed(self, data):
        if self.dead:
            return
        self.buf += data
        while not self.dead:
            if self.conn.binary:
                if not self.take_frame():
                    return
            elif not self.take_line():
                return

    def take_line(self):
        nl = self.buf.find(b"\n")
        if nl < 0:
            if len(self.buf) > LINE_CAP + 1:
                self.error("a line longer than %d bytes" % LINE_CAP)
            return False
        wire = bytes(self.buf[:nl + 1])
        del self.buf[:nl + 1]
        text = wire[:-1].decode("utf-8", "replace")
        self.record(kind="line", line=text, hex=wire.hex(), compressed=False, raw_len=None)
        self.notice(text)
        return True

    def notice(self, text):
        """The handshake and its ack: the connection's open record and the framing switch."""
        try:
            m = json.loads(text)
        except ValueError:
            return
        if not isinstance(m, dict) or not isinstance(m.get("payload"), dict):
            return
        p = m["payload"]
        if m.get("msg_type") == "handshake":
            self.conn.log.write({
                "conn": self.conn.n, "dir": "open", "from": self.dir,
                "from_peer": m.get("from_peer"), "version": p.get("version"),
                "proto": p.get("proto"), "features": p.get("features"),
                "transient": p.get("transient") is True, "listen_port": p.get("listen_port")})
        elif m.get("msg_type") == "handshake_ack":
            proto = p.get("proto")
            feats = p.get("features")
            binary = (isinstance(proto, int) and not isinstance(proto, bool)
                      and isinstance(feats, list) and "frame-bin" in feats
                      and p.get("status") == "ok")
            self.conn.log.write({
                "conn": self.conn.n, "dir": "ack", "from": self.dir, "status": p.get("status"),
                "proto": proto, "features": feats, "binary": binary})
            if binary:
                self.conn.binary = True

    def take_frame(self):
        if len(self.buf) < 5:
            return False
        (length,) = struct.unpack(">I", self.buf[:4])
        if length == 0 or length > FRAME_CAP:
            self.error("frame length %d" % length)
            return False
        if len(self.buf) < 4 + length:
            return False
        wire = bytes(self.buf[:4 + length])
        del self.buf[:4 + length]
        flags = wire[4]
        body = wire[5:]
        if flags & 0xFE:
            self.error("reserved flag bits 0x%02x" % flags)
            return False
        raw_len = None
        if flags & 1:
            if len(body) < 4:
                self.error("compressed frame without raw_len")
                return False
            (raw_len,) = struct.unpack("<I", body[:4])
            if raw_len > RAW_CAP:
                self.error("raw_len %d over 4 MiB" % raw_len)
                return False
            try:
                body = lz4_block_decompress(body[4:], raw_len)
            except LZ4Error as e:
                self.record(kind="frame", line=None, hex=wire.hex(), compressed=True,
                            raw_len=raw_len, error="lz4: %s" % e)
                return True
        self.record(kind="frame", line=body.decode("utf-8", "replace"), hex=wire.hex(),
                    compressed=bool(flags & 1), raw_len=raw_len)
        return True


def pump(conn, parser, src, dst):
    clean = False
    try:
        while True:
            data = src.recv(65536)
            if not data:
                clean = True
                break
            # Parsed before it is forwarded: the ack switches the framing before the dialler
            # can answer it.
            try:
                parser.feed(data)
            except Exception as e:  # a recording fault must never stop the forwarding
                parser.error("tap fault: %r" % e)
            dst.sendall(data)
    except OSError:
        pass
    # An end of stream is passed on as one (a half-close stays a half-close); an error
    # ends both directions.
    try:
        if clean:
            dst.shutdown(socket.SHUT_WR)
        else:
            for s in (src, dst):
                s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    with conn.lock:
        conn.ended += 1
        last = conn.ended == 2
    if last:
        rec = {"conn": conn.n, "dir": "close"}
        if parser.buf and not parser.dead:
            rec["unparsed"] = len(parser.buf)
        conn.log.write(rec)
        src.close()
        dst.close()


def main():
    ap = argparse.ArgumentParser(description="relay tap for claudectl-interop.sh")
    ap.add_argument("--label")
    ap.add_argument("--conn-base", type=int, default=0)
    ap.add_argument("--dialer", choices=("hub", "ctl"), default="hub")
    ap.add_argument("listen_host")
    ap.add_argument("up_host")
    ap.add_argument("up_port", type=int)
    ap.add_argument("log")
    a = ap.parse_args()
    log = Log(a.log, a.label)
    down_dir, up_dir = ("to_ctl", "to_hub") if a.dialer == "hub" else ("to_hub", "to_ctl")

    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((a.listen_host, 0))
    srv.listen(16)
    print("tap on %s:%d" % srv.getsockname(), flush=True)
    n = a.conn_base
    while True:
        down, _ = srv.accept()
        n += 1
        try:
            up = socket.create_connection((a.up_host, a.up_port), timeout=10)
            up.settimeout(None)
        except OSError as e:
            log.write({"conn": n, "dir": "error", "error": "cannot dial upstream: %s" % e})
            down.close()
            continue
        conn = Conn(n, log)
        log.write({"conn": n, "dir": "accept"})
        threading.Thread(target=pump, args=(conn, Parser(conn, down_dir), down, up),
                         daemon=True).start()
        threading.Thread(target=pump, args=(conn, Parser(conn, up_dir), up, down),
                         daemon=True).start()


if __name__ == "__main__":
    main()
