"""clients/python/cordon_admin.py against the real cordon-server daemon and a
real cordon-agent on loopback (run by ctest: CORDON_SERVER_BIN and
CORDON_AGENT_BIN name the programs, PYTHONPATH the client)."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import cordon_admin
from cordon_admin import AdminError, Client, Output, result_output

SERVER = os.environ.get("CORDON_SERVER_BIN", "build/cordon-server")
AGENT = os.environ.get("CORDON_AGENT_BIN", "build/cordon-agent")
MANIFEST = '{"name":"%s","version":"1","entry":["/bin/sh","run.sh"]}'


def run(*argv):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise AssertionError("%s: exit %d: %s" % (" ".join(argv), p.returncode, p.stderr))
    return p


def wait_for(pred, secs, what):
    end = time.monotonic() + secs
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


class AdminClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="cordon-pyclient-")
        os.chmod(cls.dir, 0o755)
        cls.state = os.path.join(cls.dir, "state")
        cls.sock = os.path.join(cls.state, "admin.sock")
        run(SERVER, "init", "--state", cls.state)
        run(SERVER, "user", "add", "alice", "--state", cls.state)
        cls.server_log = open(os.path.join(cls.dir, "server.log"), "w+")
        cls.server = subprocess.Popen(
            [SERVER, "run", "--state", cls.state, "--listen", "127.0.0.1:0", "--job-grace", "5"],
            stdout=cls.server_log, stderr=cls.server_log)
        cls.agent = None

        def port():
            cls.server_log.seek(0)
            m = re.search(r"msg=listening listen=127\.0\.0\.1:(\d+)", cls.server_log.read())
            return m and m.group(1)

        addr = "127.0.0.1:" + wait_for(port, 10, "the server")
        code = run(SERVER, "pair-code", "alice", "--state", cls.state).stdout.splitlines()[0]
        cls.agent_dir = os.path.join(cls.dir, "agent")
        p = run(AGENT, "--config", cls.agent_dir, "pair", "--server", addr, "--code", code,
                "--name", "laptop")
        cls.device = re.search(r"paired as device ([0-9a-f]{32})", p.stderr).group(1)
        cls.packages = {}

    @classmethod
    def tearDownClass(cls):
        for p in (cls.agent, cls.server):
            if p:
                p.kill()
                p.wait()
        cls.server_log.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def start_agent(cls):
        if cls.agent is None:
            cls.agent_log = open(os.path.join(cls.dir, "agent.log"), "w")
            cls.agent = subprocess.Popen([AGENT, "--config", cls.agent_dir, "run"],
                                         stdout=cls.agent_log, stderr=cls.agent_log)

    def pack(self, name, script):
        if name not in self.packages:
            d = os.path.join(self.dir, name)
            os.makedirs(d)
            with open(os.path.join(d, "manifest.json"), "w") as f:
                f.write(MANIFEST % name)
            with open(os.path.join(d, "run.sh"), "w") as f:
                f.write(script)
            out = os.path.join(self.dir, name + ".cpkg")
            run(SERVER, "pack", d, "-o", out, "--state", self.state)
            self.packages[name] = out
        return self.packages[name]

    def setUp(self):
        self.c = Client(self.sock, timeout=30)
        self.start_agent()
        wait_for(lambda: self.c.device(self.device)["online"], 10, "the agent to connect")

    def tearDown(self):
        self.c.close()

    def test_hello_agrees_on_version_1(self):
        self.assertEqual(self.c.version, 1)
        self.assertEqual(self.c.server, "cordon-server")
        c = Client(self.sock, hello=False)
        with self.assertRaises(AdminError) as e:
            c.hello(versions=[99])
        self.assertEqual(e.exception.code, "usage")
        c.close()

    def test_errors_carry_the_stable_code(self):
        with self.assertRaises(AdminError) as e:
            self.c.job("0" * 32)
        self.assertEqual(e.exception.code, "not_found")
        with self.assertRaises(AdminError) as e:
            self.c.dispatch("nobody", b"not a package")
        self.assertEqual(e.exception.code, "not_found")
        with self.assertRaises(AdminError) as e:
            self.c.device("kitchen")
        self.assertEqual(e.exception.code, "not_found")
        with self.assertRaises(AdminError) as e:
            self.c.dispatch("alice", b"not a package")
        self.assertEqual(e.exception.code, "package_corrupt")
        self.c.ping()  # the connection goes on

    def test_dispatch_wait_and_watch_sees_the_states(self):
        pkg = self.pack("hello", 'echo "hi $1"\n')
        with self.c.watch(timeout=30) as events:
            r = self.c.dispatch("alice", pkg, ["python"])
            self.assertEqual(r["state"], "sent")
            self.assertEqual(r["device"], self.device)
            job = self.c.wait(r["job_id"], timeout=30)
            self.assertEqual(job["state"], "done")
            self.assertEqual(job["result"]["stdout"], "hi python\n")
            states = []
            for ev in events:
                if ev["event"] == "job_state" and ev["job"] == r["job_id"]:
                    states.append(ev["state"])
                    if ev["state"] == "done":
                        break
            self.assertEqual(states, ["sent", "running", "done"])
        # the same package as bytes, waiting in the dispatch itself
        with open(pkg, "rb") as f:
            job = self.c.dispatch("alice", f.read(), ["bytes"], wait=True)
        self.assertEqual(job["result"]["stdout"], "hi bytes\n")
        ids = [j["id"] for j in self.c.jobs(user="alice")]
        self.assertIn(r["job_id"], ids)
        self.assertIn(job["id"], ids)

    def test_cancel_a_running_job(self):
        pkg = self.pack("sleepy", "echo started; sleep 30\n")
        r = self.c.dispatch("alice", pkg)
        wait_for(lambda: self.c.job(r["job_id"])["state"] == "running", 20, "running")
        self.assertEqual(self.c.cancel(r["job_id"])["state"], "cancelled")
        job = self.c.wait(r["job_id"], timeout=40)
        self.assertEqual(job["state"], "cancelled")
        with self.assertRaises(AdminError) as e:
            self.c.cancel(r["job_id"])
        self.assertEqual(e.exception.code, "not_running")

    def test_labels_and_devices(self):
        self.assertEqual(self.c.label(self.device, set={"site": "home"}), {"site": "home"})
        dev = [d for d in self.c.devices(user="alice") if d["id"] == self.device][0]
        self.assertEqual(dev["labels"], {"site": "home"})
        self.assertEqual(self.c.label(self.device, remove=["site"]), {})

    def test_devices_by_name_filters_rename_and_pair_codes(self):
        name = self.c.device(self.device)["name"]
        dev = self.c.device(name, user="alice")
        self.assertEqual(dev["id"], self.device)
        self.assertTrue(dev["online"])
        self.assertIn("facts", dev)
        self.assertEqual(self.c.device(self.device[:8])["id"], self.device)
        self.assertEqual(self.c.rename(name, "den")["name"], "den")
        self.assertEqual(self.c.device("den")["id"], self.device)
        self.assertEqual(self.c.rename("den", name)["name"], name)
        self.assertEqual(self.c.approve(name)["already"], True)
        pkg = self.pack("hello", 'echo "hi $1"\n')
        job = self.c.dispatch("alice", pkg, ["f"], wait=True)
        self.assertEqual([j["id"] for j in self.c.jobs(device=name, limit=1)], [job["id"]])
        self.assertEqual(self.c.jobs(device=name, since=4000000000), [])
        done = self.c.jobs(job_state="done")
        self.assertIn(job["id"], [j["id"] for j in done])
        self.assertTrue(all(j["state"] == "done" for j in done))
        codes = self.c.pair_codes(user="alice")
        self.assertTrue(codes)
        self.assertTrue(all(c["user"] == "alice" and "secret" not in c for c in codes))
        self.assertEqual(self.c.pair_code_revoke(codes[0]["id"])["already"], True)

    def test_follow_of_a_finished_job_is_its_result(self):
        pkg = self.pack("hello", 'echo "hi $1"\n')
        job = self.c.dispatch("alice", pkg, ["again"], wait=True)
        items = list(self.c.follow(job["id"], timeout=30))
        self.assertEqual(len(items), 1)
        self.assertEqual(items[0]["state"], "done")
        self.assertEqual(items[0]["result"]["stdout"], "hi again\n")

    def test_follow_shows_the_first_line_before_the_job_ends(self):
        pkg = self.pack("twice", "sleep 1; echo first; sleep 2; echo second >&2\n")
        r = self.c.dispatch("alice", pkg)
        stream = self.c.follow(r["job_id"], timeout=30)
        first = next(stream)
        self.assertIsInstance(first, Output)
        self.assertEqual((first.stream, first.offset, first.data), ("stdout", 0, b"first\n"))
        self.assertEqual(self.c.job(r["job_id"])["state"], "running")
        rest = list(stream)
        self.assertEqual(rest[0], Output("stderr", 0, b"second\n"))
        job = rest[-1]
        self.assertEqual(len(rest), 2)
        self.assertEqual(job["state"], "done")
        self.assertEqual(job["result"]["stdout"], "first\n")
        self.assertEqual(job["result"]["stderr"], "second\n")

    def test_result_output_reads_control_bytes_and_text_as_the_job_wrote_them(self):
        pkg = self.pack("controls", "printf 'a\\001b\\033[0m\\000end'\nprintf 'plain\\ttext\\n' >&2\n")
        job = self.c.dispatch("alice", pkg, wait=True)
        self.assertEqual(job["state"], "done")
        res = job["result"]
        # control bytes go as base64, text as a string
        self.assertIsNone(res["stdout"])
        self.assertIn("stdout_base64", res)
        self.assertEqual(res["stderr"], "plain\ttext\n")
        self.assertEqual(result_output(res, "stdout"), b"a\x01b\x1b[0m\x00end")
        self.assertEqual(result_output(res, "stderr"), b"plain\ttext\n")


class ResultOutputTest(unittest.TestCase):
    """result_output alone, on result objects of every form."""

    def test_each_form_and_a_string_of_escapes_from_before(self):
        self.assertEqual(result_output({"stdout": "hi\n"}, "stdout"), b"hi\n")
        self.assertEqual(result_output({"stdout": None, "stdout_base64": "AQID/w=="}, "stdout"),
                         b"\x01\x02\x03\xff")
        # what a server before base64 for control bytes stored
        self.assertEqual(result_output({"stderr": "\u0001x"}, "stderr"), b"\x01x")
        self.assertEqual(result_output({"stdout": "caf\u00e9"}, "stdout"), b"caf\xc3\xa9")

    def test_a_result_recorded_without_its_output_is_none(self):
        res = {"stdout": None, "stderr": None,
               "error": {"code": "result_unstorable", "message": "too large"}}
        self.assertIsNone(result_output(res, "stdout"))

    def test_what_is_not_one_output_is_refused(self):
        for res in ({}, {"stdout": 1}, {"stdout": "a", "stdout_base64": "YQ=="},
                    {"stdout": None, "stdout_base64": "YQ"},
                    {"stdout": None, "stdout_base64": "Y*=="},
                    {"stdout": None, "stdout_base64": "A" * (4 * ((1 << 20) // 3 + 2))}):
            with self.assertRaises(ValueError, msg=repr(res)[:80]):
                result_output(res, "stdout")
        with self.assertRaises(ValueError):
            result_output({"stdin": ""}, "stdin")


if __name__ == "__main__":
    unittest.main()
