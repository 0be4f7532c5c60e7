#!/usr/bin/env python3
"""The backend each test VM runs (and the simulator's members speak): port 80 answers one line per
request with this backend's name; "STREAM" sends the name every 200 ms until the peer goes. Port
8080 is the LB's HTTP health probe: 200, or 503 while /tmp/unhealthy exists (run.sh toggles it)."""
import os, socket, socketserver, sys, threading, time
from http.server import BaseHTTPRequestHandler, HTTPServer

NAME = (sys.argv[1] if len(sys.argv) > 1 else socket.gethostname()).encode()


class Service(socketserver.StreamRequestHandler):
    def handle(self):
        for line in self.rfile:
            if line.strip() == b"STREAM":
                while True:
                    self.wfile.write(NAME + b"\n")
                    self.wfile.flush()
                    time.sleep(0.2)
            self.wfile.write(NAME + b"\n")
            self.wfile.flush()


class Health(BaseHTTPRequestHandler):
    def do_GET(self):
        code = 503 if os.path.exists("/tmp/unhealthy") else 200
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *a):
        pass


class Threaded(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True


if __name__ == "__main__":
    threading.Thread(target=HTTPServer(("", 8080), Health).serve_forever, daemon=True).start()
    Threaded(("", 80), Service).serve_forever()
