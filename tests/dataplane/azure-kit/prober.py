#!/usr/bin/env python3
"""SYN prober at a fixed rate (default 100 Hz: every connection a new 5-tuple, one request, the
backend's name back) and a few long-lived streams, against a load balancer frontend. One JSON line
per event on stdout, Unix times:
  {"kind":"new","t":start,"sport":p,"outcome":"ok|timeout|refused|reset","backend":name|null}
  {"kind":"stream_open","sid":i,"t":..,"backend":name}
  {"kind":"stream_end","sid":i,"t_last":last byte,"outcome":"reset|eof|hung|alive","backend":name}
Speaks the protocol of backend.py and of the simulator's members (tests/dataplane)."""
import argparse, json, socket, sys, threading, time

LOCK = threading.Lock()


def emit(d):
    with LOCK:
        sys.stdout.write(json.dumps(d) + "\n")
        sys.stdout.flush()


def one(target, tmo):
    t = time.time()
    s = socket.socket()
    s.settimeout(tmo)
    sport, outcome, backend = None, "ok", None
    try:
        s.bind(("", 0))
        sport = s.getsockname()[1]
        s.connect(target)
        s.sendall(b"REQ\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(64)
            if not chunk:
                raise EOFError
            data += chunk
        backend = data.decode().strip()
    except socket.timeout:
        outcome = "timeout"
    except ConnectionRefusedError:
        outcome = "refused"
    except (ConnectionResetError, EOFError, OSError):
        outcome = "reset"
    finally:
        s.close()
    emit({"kind": "new", "t": t, "sport": sport, "outcome": outcome, "backend": backend})


def stream(sid, target, hung_after, end):
    s = socket.create_connection(target, timeout=5)
    s.sendall(b"STREAM\n")
    s.settimeout(hung_after)
    buf, backend, last, outcome = b"", None, time.time(), "alive"
    try:
        while time.time() < end:
            chunk = s.recv(256)
            if not chunk:
                outcome = "eof"
                break
            last = time.time()
            buf += chunk
            if backend is None and b"\n" in buf:
                backend = buf.split(b"\n")[0].decode().strip()
                emit({"kind": "stream_open", "sid": sid, "t": last, "backend": backend})
            buf = buf[-64:]
    except socket.timeout:
        outcome = "hung"
    except (ConnectionResetError, OSError):
        outcome = "reset"
    emit({"kind": "stream_end", "sid": sid, "t_last": last, "outcome": outcome, "backend": backend})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True, help="host:port of the frontend")
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--connect-timeout", type=float, default=1.0)
    ap.add_argument("--hung-after", type=float, default=2.0)
    a = ap.parse_args()
    host, port = a.target.rsplit(":", 1)
    target = (host, int(port))
    end = time.time() + a.duration
    threads = [threading.Thread(target=stream, args=(i, target, a.hung_after, end)) for i in range(a.streams)]
    for th in threads:
        th.start()
    nxt = time.time()
    while nxt < end - a.connect_timeout:
        time.sleep(max(0.0, nxt - time.time()))
        threading.Thread(target=one, args=(target, a.connect_timeout), daemon=True).start()
        nxt += 1.0 / a.rate
    for th in threads:
        th.join()
    time.sleep(a.connect_timeout + 0.2)


if __name__ == "__main__":
    main()
