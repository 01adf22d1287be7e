"""Chromium in a network namespace of its own, reaching the host's addresses through a SOCKS
proxy that lives in the host's namespace.

Chromium abandons every request in flight (ERR_NETWORK_CHANGED) when any interface of its
namespace comes or goes, and Docker adds and removes one per container: the k8s lane beside the
portal's tests starts pods all the time, and CI saw pages lost at each step of a test. In a
namespace whose only interface is its loopback, Chromium sees no change. ChromeDriver drives it
over a pipe (``--remote-debugging-pipe``), as its debugging port would be out of reach there.

Run as ``python own_network.py CHROMIUM ARGS...`` (ChromeDriver's "binary"): it moves into a new
namespace, forks the proxy, which goes back to the host's namespace for the connections it makes,
and becomes Chromium, told to send everything through the proxy. Root only (CI runs as root).
"""

import contextlib
import ctypes
import fcntl
import os
import signal
import socket
import struct
import sys
import threading

CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
LIBC = ctypes.CDLL(None, use_errno=True)


def _call(name: str, *args: int) -> None:
    if getattr(LIBC, name)(*args) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{name}: {os.strerror(errno)}")


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        flags = struct.unpack("16sH", fcntl.ioctl(s, SIOCGIFFLAGS, struct.pack("16sH", b"lo", 0)))
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags[1] | IFF_UP))


def _exactly(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the browser hung up")
        data += chunk
    return data


def pump(src: socket.socket, dst: socket.socket) -> None:
    """What ``src`` sends, sent on to ``dst`` until either end hangs up; then both are shut."""
    try:
        while chunk := src.recv(65536):
            dst.sendall(chunk)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


def _serve(conn: socket.socket) -> None:
    """One SOCKS 5 connection (RFC 1928, no authentication, CONNECT only)."""
    try:
        _ver, methods = _exactly(conn, 2)
        _exactly(conn, methods)
        conn.sendall(b"\x05\x00")
        _ver, command, _reserved, kind = _exactly(conn, 4)
        if kind == 1:
            host = socket.inet_ntop(socket.AF_INET, _exactly(conn, 4))
        elif kind == 4:
            host = socket.inet_ntop(socket.AF_INET6, _exactly(conn, 16))
        else:
            host = _exactly(conn, _exactly(conn, 1)[0]).decode()
        (port,) = struct.unpack("!H", _exactly(conn, 2))
        if command != 1:
            conn.sendall(b"\x05\x07\x00\x01" + bytes(6))
            return
        try:
            out = socket.create_connection((host, port), timeout=30)
        except OSError:
            conn.sendall(b"\x05\x05\x00\x01" + bytes(6))
            return
        out.settimeout(None)
        conn.sendall(b"\x05\x00\x00\x01" + bytes(6))
        threading.Thread(target=pump, args=(out, conn), daemon=True).start()
        pump(conn, out)
    except (OSError, ValueError):
        pass
    finally:
        conn.close()


def _proxy(listener: socket.socket, host_network: int) -> None:
    """Until Chromium (this process's parent, once it has exec'd) is gone: connections accepted
    in the new namespace, made in the host's."""
    _call("prctl", PR_SET_PDEATHSIG, signal.SIGKILL)
    _call("setns", host_network, CLONE_NEWNET)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_serve, args=(conn,), daemon=True).start()


def main(argv: list[str]) -> None:
    host_network = os.open("/proc/self/ns/net", os.O_RDONLY)
    _call("unshare", CLONE_NEWNET)
    _loopback_up()
    listener = socket.create_server(("127.0.0.1", 0), backlog=64)
    port = listener.getsockname()[1]
    if os.fork() == 0:
        os.closerange(3, host_network)  # not ChromeDriver's pipes: Chromium alone holds them
        _proxy(listener, host_network)
    listener.close()
    os.close(host_network)
    chromium, *args = argv
    proxy = [f"--proxy-server=socks5://127.0.0.1:{port}", "--proxy-bypass-list=<-loopback>"]
    os.execv(chromium, [chromium, *proxy, *args])


if __name__ == "__main__":
    main(sys.argv[1:])
