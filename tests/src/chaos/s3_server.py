# moto's S3 server, with a switch: `s3_server.py PORT` serves on 127.0.0.1:PORT and reads
# commands on stdin, one a line, answering each on stdout once done:
#   stop   closes the listener and every open connection (clients get refused or reset), but
#          keeps the buckets and objects, which live in this process;
#   start  serves again on the same port.
# End of input ends it. moto_server itself keeps its state in memory too, so stopping that
# process would lose every object: this is an outage, not a lost disk (issue 39, s3-outage).
import socket
import sys
import threading

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import make_server

PORT = int(sys.argv[1])
APP = DomainDispatcherApplication(create_backend_app)
OPEN = set()
LOCK = threading.Lock()


class Handler(MotoRequestHandler):
    # Tracked so that a stop can cut keep-alive connections, which would otherwise go on
    # being served by their threads after the listener is closed.
    def setup(self):
        super().setup()
        with LOCK:
            OPEN.add(self.connection)

    def finish(self):
        with LOCK:
            OPEN.discard(self.connection)
        super().finish()


def serve():
    server = make_server("127.0.0.1", PORT, APP, threaded=True, request_handler=Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread


def stop(server, thread):
    server.shutdown()
    server.server_close()
    thread.join()
    with LOCK:
        connections = list(OPEN)
    for connection in connections:
        try:
            connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def main():
    running = serve()
    print("started", flush=True)
    for line in sys.stdin:
        command = line.strip()
        if command == "stop" and running:
            stop(*running)
            running = None
            print("stopped", flush=True)
        elif command == "start" and not running:
            running = serve()
            print("started", flush=True)
        else:
            print(f"error: {command!r} now", flush=True)
    if running:
        stop(*running)


main()
