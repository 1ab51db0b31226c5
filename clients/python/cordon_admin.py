"""A client of cordon-server's admin API (docs/protocol/admin.md).

Python 3 standard library only. Import it, or copy this one file:

    from cordon_admin import Client, AdminError

    with Client("/var/lib/cordon-server/admin.sock") as c:
        job_id = c.dispatch("alice", "hello.cpkg", ["world"])["job_id"]
        for item in c.follow(job_id):
            if isinstance(item, Output):
                sys.stdout.buffer.write(item.data)
            else:
                print("ended", item["state"])

The caller must be the daemon's user, root, or a member of the group
cordon-admin. Errors the daemon answers raise AdminError, whose ``code`` is
the stable code (core/error.h: "usage", "no_eligible_device", ...).
"""

import base64
import collections
import json
import os
import socket

__all__ = ["AdminError", "Client", "Output", "Stream", "PROTOCOL_VERSION", "result_output"]

PROTOCOL_VERSION = 1
REQUEST_MAX = 8192  # a request line with its newline is shorter
REPLY_MAX = 16 << 20  # bytes of one reply line
BODY_MAX = 1 << 30  # bytes of a package sent over the socket

OUTPUT_MAX = 1 << 20  # bytes of one stream of a result (output_kb 1024)

Output = collections.namedtuple("Output", "stream offset data")
Output.__doc__ = "A piece of a followed job's output: stream is 'stdout' or 'stderr'."


class AdminError(Exception):
    """The daemon said no: code is the stable error code, reply the line."""

    def __init__(self, code, message, reply=None):
        super().__init__("%s: %s" % (code, message))
        self.code = code
        self.message = message
        self.reply = reply or {}


class _Conn:
    """One connection: request lines out, reply lines in."""

    def __init__(self, path, timeout):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(path)
        except OSError:
            self.sock.close()
            raise
        self.buf = b""

    def send(self, obj, body=None):
        line = json.dumps(obj, separators=(",", ":")).encode() + b"\n"
        if len(line) >= REQUEST_MAX:
            raise AdminError("limit_exceeded", "request too long (client side)")
        self.sock.sendall(line)
        if body is not None:
            self.sock.sendall(body)

    def line(self):
        while b"\n" not in self.buf:
            if len(self.buf) > REPLY_MAX:
                raise AdminError("limit_exceeded", "reply too large (client side)")
            chunk = self.sock.recv(65536)
            if not chunk:
                raise AdminError("protocol_error", "the daemon closed the connection")
            self.buf += chunk
        raw, self.buf = self.buf.split(b"\n", 1)
        obj = json.loads(raw.decode())
        if not isinstance(obj, dict):
            raise AdminError("protocol_error", "the daemon sent a line that is not an object")
        return obj

    def close(self):
        self.sock.close()


def _check(reply):
    if reply.get("ok") is not True:
        raise AdminError(reply.get("code", "internal_error"), reply.get("message", ""), reply)
    return reply


class Stream:
    """The lines of a watch or a follow, on a connection of their own.

    Iterate it; close() (or leaving a with block) ends it."""

    def __init__(self, conn, convert):
        self._conn = conn
        self._convert = convert
        self._done = False

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        try:
            line = self._conn.line()
        except Exception:
            self.close()
            raise
        if line.get("event") == "error":
            self.close()
            _check(line)
        item, last = self._convert(line)
        if last:
            self.close()
        return item

    def close(self):
        if not self._done:
            self._done = True
            self._conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def result_output(result, stream):
    """The bytes a job wrote to stream ("stdout" or "stderr"), from a
    result object (a job's "result"; docs/PROTOCOL.md "Result"): its
    string when the output was text, else the base64 of <stream>_base64.
    None for a result the server recorded without its output
    (error.code "result_unstorable"). Raises ValueError for a result that
    holds neither form or both, or more than OUTPUT_MAX bytes."""
    if stream not in ("stdout", "stderr"):
        raise ValueError("stream is 'stdout' or 'stderr'")
    if not isinstance(result, dict) or stream not in result:
        raise ValueError("not a result with %s" % stream)
    text, b64 = result[stream], result.get(stream + "_base64")
    if isinstance(text, str) and b64 is None:
        data = text.encode("utf-8")
    elif text is None and b64 is None:
        return None
    elif text is None and isinstance(b64, str):
        # checked before decoding: 4 characters per 3 bytes, padded
        if len(b64) % 4 or len(b64) // 4 > (OUTPUT_MAX + 2) // 3:
            raise ValueError("%s_base64 is not the base64 of an output" % stream)
        data = base64.b64decode(b64, validate=True)
    else:
        raise ValueError("%s: neither a string nor null with %s_base64" % (stream, stream))
    if len(data) > OUTPUT_MAX:
        raise ValueError("%s is above %d bytes" % (stream, OUTPUT_MAX))
    return data


def _follow_line(line):
    if line.get("event") == "output":
        data = base64.b64decode(line.get("data", ""))
        return Output(line.get("stream"), line.get("offset"), data), False
    if line.get("event") == "end":
        return _check(line).get("job"), True
    raise AdminError("protocol_error", "unexpected line in a follow: %r" % (line,))


class Client:
    """A connection to the daemon's admin socket (one request at a time).

    wait, follow and watch take a connection of their own, so that a long
    wait does not hold up other requests. timeout (seconds, None: none)
    bounds each request of the main connection."""

    def __init__(self, socket_path, timeout=30.0, hello=True):
        self.path = os.fspath(socket_path)
        self.timeout = timeout
        self.version = None
        self.server = None
        self._conn = _Conn(self.path, timeout)
        if hello:
            self.hello()

    def close(self):
        self._conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def request(self, op, body=None, **args):
        """Send {"op": op, **args} (and body's bytes); the ok reply."""
        req = {"op": op}
        req.update({k: v for k, v in args.items() if v is not None})
        if body is not None:
            req["bytes"] = len(body)
        self._conn.send(req, body)
        return _check(self._conn.line())

    def _new(self, timeout=None):
        conn = _Conn(self.path, timeout)
        conn.send({"op": "hello", "versions": [PROTOCOL_VERSION]})
        _check(conn.line())
        return conn

    def hello(self, versions=(PROTOCOL_VERSION,)):
        """The version exchange (the first request of the connection)."""
        r = self.request("hello", versions=list(versions))
        self.version = r["version"]
        self.server = r.get("server")
        return r

    def ping(self):
        return self.request("ping")

    def sessions(self):
        return self.request("sessions")["sessions"]

    def dispatch(self, user, package, args=(), device=None, where=None, wait=False,
                 no_queue=False, queue_ttl=None, explain=False):
        """Send a job (package: a path or the package's bytes).

        The reply: {"job_id", "device", "state", ...}; with wait=True the
        job object once it is over (on a connection of its own)."""
        if isinstance(package, (bytes, bytearray, memoryview)):
            body = bytes(package)
        else:
            with open(package, "rb") as f:
                body = f.read(BODY_MAX + 1)
        if len(body) > BODY_MAX:
            raise AdminError("package_too_large", "the package is larger than 1 GiB")
        req = {"op": "dispatch", "user": user, "args": list(args), "bytes": len(body)}
        if device is not None:
            req["device"] = device
        if where:
            req["where"] = ["%s=%s" % kv for kv in sorted(dict(where).items())] \
                if isinstance(where, dict) else list(where)
        if no_queue:
            req["no_queue"] = True
        if queue_ttl is not None:
            req["queue_ttl"] = int(queue_ttl)
        if explain:
            req["explain"] = True
        if not wait:
            self._conn.send(req, body)
            return _check(self._conn.line())
        req["wait"] = True
        conn = self._new()
        try:
            conn.send(req, body)
            return _check(conn.line())["job"]
        finally:
            conn.close()

    def cancel(self, job_id):
        return self.request("cancel", job=job_id)

    def wait(self, job_id, timeout=None):
        """The job object once it is over."""
        conn = self._new(timeout)
        try:
            conn.send({"op": "wait", "job": job_id})
            return _check(conn.line())["job"]
        finally:
            conn.close()

    def job(self, job_id):
        return self.request("job", job=job_id)["job"]

    def jobs(self, user=None, device=None, job_state=None, since=None, limit=None):
        """The jobs, newest first: of user, of device (id, name or id
        prefix), in job_state ("queued", "running", ...), created at or
        after since (Unix seconds), at most limit (0: all; default 100)."""
        return self.request("jobs", user=user, device=device, job_state=job_state,
                            since=None if since is None else int(since), limit=limit)["jobs"]

    def devices(self, user=None):
        return self.request("devices", user=user)["devices"]

    def device(self, device, user=None):
        """One device (id, name or a unique id prefix; among user's when
        given) as `device show --json` prints it: facts, labels, running
        and recent jobs."""
        return self.request("device", device=device, user=user)["device"]

    def label(self, device, set=None, remove=None, user=None):
        """Set ({key: value} or ["k=v"]) and remove (keys) labels: the labels after."""
        if isinstance(set, dict):
            set = ["%s=%s" % kv for kv in sorted(set.items())]
        return self.request("label", device=device, user=user, set=list(set or []),
                            remove=list(remove or []))["labels"]

    def rename(self, device, name, user=None):
        """Rename a device: the device after."""
        return self.request("rename", device=device, name=name, user=user)["device"]

    def approve(self, device, user=None):
        """Approve a pending device: {"device", "already"}."""
        return self.request("approve", device=device, user=user)

    def reject(self, device, user=None):
        """Reject (revoke) a pending device: {"device", "disconnected"}."""
        return self.request("reject", device=device, user=user)

    def revoke(self, device, user=None):
        """Revoke a device and close its live session: {"device",
        "already", "disconnected"}."""
        return self.request("revoke", device=device, user=user)

    def revoke_session(self, device_id):
        """Revoke a device; whether a live session was closed (kept for
        callers of version 1's first release: revoke() says more)."""
        return self.revoke(device_id)["disconnected"]

    def pair_codes(self, user=None):
        """The pairing codes (ids and states, never the secrets)."""
        return self.request("pair_codes", user=user)["codes"]

    def pair_code_revoke(self, code_id):
        """Burn a live pairing code: {"id", "already"}."""
        return self.request("pair_code_revoke", code=code_id)

    def follow(self, job_id, timeout=None):
        """A Stream of Output(stream, offset, data) while the job runs, then
        the job object (its stored result) once it is over. timeout
        (seconds): the longest silence before socket.timeout."""
        conn = self._new(timeout)
        conn.send({"op": "follow", "job": job_id})
        try:
            _check(conn.line())
        except Exception:
            conn.close()
            raise
        return Stream(conn, _follow_line)

    def watch(self, timeout=None):
        """A Stream of events ({"event": "job_state" | "device_online" |
        "device_offline", ...}) until closed. A watcher that falls behind
        gets AdminError("limit_exceeded"): read the state again. timeout
        (seconds): the longest silence before socket.timeout."""
        conn = self._new(timeout)
        conn.send({"op": "watch"})
        try:
            _check(conn.line())
        except Exception:
            conn.close()
            raise
        return Stream(conn, lambda line: (line, False))
