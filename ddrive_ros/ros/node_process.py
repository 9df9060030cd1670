"""The planner node as a child process (`python -m ddrive_ros.ros.node`), for replay, the demo and
closed-loop runs: parameters on the command line, its own ROS_DOMAIN_ID, a log file, RSS."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from ddrive_ros.ros.domain_id import check_domain_id


def param_text(v: Any) -> str:
    """A value as `-p name:=value` text; strings are quoted so YAML keeps them strings (a numeric
    checkpoint name stays a name)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    return str(v)


def rss_kb(pid: int) -> int | None:
    """Resident set size of a process (Linux /proc), None when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class NodeProcess:
    """A running planner node; `stop()` sends SIGINT (a clean rclpy shutdown), then kills."""

    def __init__(self, params: dict[str, Any], domain_id: int, log_path: Path, module: str = "ddrive_ros.ros.node",
                 remaps: dict[str, str] | None = None, executable: list[str] | None = None,
                 params_file: str | Path | None = None, env: dict[str, str] | None = None):
        """`remaps`: node-relative name -> topic (`-r ~/input/odometry:=/odom`); `executable`: a
        command instead of `python -m module` (e.g. an installed `ddrive_planner` script);
        `params_file`: a ROS parameters file (the -p values override it); `env`: the environment
        (default this process's)."""
        args = list(executable) if executable else [sys.executable, "-m", module]
        args.append("--ros-args")
        if params_file is not None:
            args += ["--params-file", str(params_file)]
        for k, v in params.items():
            args += ["-p", f"{k}:={param_text(v)}"]
        for k, v in (remaps or {}).items():
            args += ["-r", f"{k}:={v}"]
        env = dict(os.environ if env is None else env, ROS_DOMAIN_ID=str(check_domain_id(domain_id, "node domain_id")),
                   PYTHONUNBUFFERED="1")
        self.log_path = Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(args, env=env, stdout=self.log, stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def rss_kb(self) -> int:
        return rss_kb(self.pid) or -1

    def stop(self, timeout: float = 15.0) -> int:
        """SIGINT, then up to `timeout` s for a clean exit. A node still running then gets SIGUSR1 (the node dumps every
        thread's stack into its log: `node.main`), a second to write it, and SIGKILL if it is still up; the log says
        so. Returns the exit code (-9 when killed)."""
        if self.alive():
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGUSR1)
                try:
                    self.proc.wait(1.0)
                    what = "it exited within a second of it"
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(5)
                    what = "killed"
                self.log.write(f"\n[NodeProcess] the node did not exit within {timeout:g} s of SIGINT; its threads' "
                               f"stacks, from SIGUSR1, are above; {what}\n")
        self.log.close()
        return self.proc.returncode

    def tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text().splitlines()[-n:])
        except OSError as e:
            return f"(node log {self.log_path} unreadable: {e})"
