#!/usr/bin/env python3
"""What idle keep-alive connections cost `tinyserve serve` (issue 16's benchmarks).

Starts `tinyserve serve` on stories260K (CPU, --threads 1), lets it settle, then for each count N
opens N connections that each send one `GET /health` with keep-alive, read the answer and then
sit idle. While they sit (inside the server's 5 s keep-alive timeout) it reads the server's
/proc: resident memory (VmRSS) and threads against the settled server, and the CPU time the
server burns over a window (utime + stime, as a share of one core). Alternates the counts with a
baseline window of no connections, `rounds` times.

    bench/idle_connections_bench.py BINARY [counts=150,500] [rounds=2] [window_s=3]
"""
import os
import socket
import subprocess
import sys
import tempfile
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            out[key] = value.strip()
    return int(out["VmRSS"].split()[0]) * 1024, int(out["Threads"])


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


def cpu_share(pid, window_s):
    before, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(window_s)
    return (cpu_seconds(pid) - before) / (time.monotonic() - t0)


def open_idle(port, n):
    request = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n"
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(request)
        socks.append(s)
    for s in socks:  # each answer is small: one read holds the whole of it
        s.settimeout(10)
        if not s.recv(4096).startswith(b"HTTP/1.1 200"):
            raise RuntimeError("/health did not answer 200")
    return socks


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    binary = sys.argv[1]
    counts = [int(c) for c in (sys.argv[2] if len(sys.argv) > 2 else "150,500").split(",")]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    window_s = float(sys.argv[4]) if len(sys.argv) > 4 else 3.0
    shared = os.environ.get("TINYSERVE_SHARED_DIR",
                            os.path.join(os.path.dirname(__file__), "..", "..", "shared"))
    with tempfile.NamedTemporaryFile(suffix=".log") as log:
        server = subprocess.Popen(
            [binary, "serve", "--model", os.path.join(shared, "models", "stories260K.bin"),
             "--tokenizer", os.path.join(shared, "models", "tok512.bin"), "--host", "127.0.0.1",
             "--port", "0", "--threads", "1"], stdout=log, stderr=subprocess.STDOUT)
        try:
            port = 0
            for _ in range(300):
                text = open(log.name).read()
                if "on http://127.0.0.1:" in text:
                    port = int(text.split("on http://127.0.0.1:")[1].split()[0].strip("/"))
                    break
                time.sleep(0.05)
            if not port:
                sys.exit("tinyserve did not start:\n" + open(log.name).read())
            open_idle(port, 8)  # the first requests' one-time allocations
            time.sleep(6)       # ...and their connections closed by the keep-alive timeout
            print(f"server pid {server.pid}, port {port}; cpu as a share of one core over "
                  f"{window_s:.0f} s windows")
            print("| round | connections | cpu idle | cpu with them | rss +MiB | "
                  "rss per connection KiB | threads |")
            print("|---|---|---|---|---|---|---|")
            for r in range(rounds):
                for n in counts:
                    rss0, threads0 = proc_status(server.pid)
                    idle = cpu_share(server.pid, window_s)
                    socks = open_idle(port, n)
                    time.sleep(0.2)
                    rss1, threads1 = proc_status(server.pid)
                    busy = cpu_share(server.pid, window_s)
                    for s in socks:
                        s.close()
                    print(f"| {r} | {n} | {idle:.3f} | {busy:.3f} | "
                          f"{(rss1 - rss0) / 2**20:.1f} | {(rss1 - rss0) / n / 1024:.1f} | "
                          f"{threads0} -> {threads1} |")
                    time.sleep(6)  # the server closes its side at the keep-alive timeout
        finally:
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
