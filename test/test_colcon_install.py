"""The vehicle install, done here: Debian's colcon builds the package into a temporary workspace
from a venv made with --system-site-packages (docs/vehicle.md), and the *installed* ddrive_planner
(its shebang that venv's python) runs with the *installed* params file, finds the shipped model
under share/, and plans on a short bag replayed into it.

Two stand-ins for what a Jazzy machine has and this one does not: /opt/ros/jazzy (rclpy and the
message packages) is the dev venv's ROS wheels, whose libraries go on LD_LIBRARY_PATH as
`source /opt/ros/jazzy/setup.bash` would put them; `pip install -r requirements-vehicle.txt` is a .pth
file adding the dev venv's site-packages after the build (colcon itself runs on Debian's packages).
"""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from ddrive_ros.bags.simple_drive import write_simple_bag
from ddrive_ros.ros.domain_id import pid_domain_id
from ddrive_ros.ros.replay import ReplayOptions, replay

ROOT = Path(__file__).resolve().parents[1]
SYSTEM_PYTHON = "/usr/bin/python3"
COLCON_APT = ["colcon", "python3-colcon-ros", "python3-colcon-python-setup-py"]


def _run(args: list[str], **kw) -> subprocess.CompletedProcess:
    done = subprocess.run(args, capture_output=True, text=True, **kw)
    assert done.returncode == 0, f"{' '.join(map(str, args))} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def _ensure_colcon() -> None:
    if subprocess.run([SYSTEM_PYTHON, "-c", "import colcon_core, colcon_ros"], capture_output=True).returncode == 0:
        return
    assert shutil.which("apt-get") and os.geteuid() == 0, "colcon is missing and apt-get (as root) is not available"
    _run(["apt-get", "install", "-y", "-q", *COLCON_APT], env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))


def _sourced_env(script: Path, base: dict[str, str]) -> dict[str, str]:
    """The environment after `source script` in bash."""
    out = _run(["bash", "-c", f"source {script} && env -0"], env=base).stdout
    return dict(line.split("=", 1) for line in out.split("\0") if "=" in line)


def test_colcon_build_then_installed_node_plans_on_a_bag(tmp_path):
    if not Path(SYSTEM_PYTHON).is_file():
        pytest.fail(f"{SYSTEM_PYTHON} (Debian's Python, which colcon runs on) is missing")
    _ensure_colcon()
    venv = tmp_path / "venv"
    _run([SYSTEM_PYTHON, "-m", "venv", "--system-site-packages", str(venv)])
    vpy = venv / "bin" / "python"
    ws = tmp_path / "ws"
    src = ws / "src" / "ddrive_ros"
    src.mkdir(parents=True)
    files = _run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT).stdout.split("\n")
    for f in filter(None, files):
        if (ROOT / f).is_file():
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, src / f)
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "LD_LIBRARY_PATH")}
    clean["PATH"] = f"{venv / 'bin'}:{clean.get('PATH', '')}"
    _run([str(vpy), "-m", "colcon", "build", "--packages-select", "ddrive_ros"], cwd=ws, env=clean)

    install = ws / "install" / "ddrive_ros"
    script = install / "lib" / "ddrive_ros" / "ddrive_planner"
    assert script.is_file() and (install / "lib" / "ddrive_ros" / "ddrive_planner_managed").is_file()
    assert script.read_text().splitlines()[0] == f"#!{vpy}"  # runs in the venv, not /usr/bin/python3
    share = install / "share" / "ddrive_ros"
    params_file = share / "config" / "planner.yaml"
    assert params_file.is_file() and (share / "models" / "fast_ddrive_tiny" / "model.safetensors").is_file()
    assert (share / "launch" / "ddrive_planner.launch.py").is_file()

    # "pip install -r requirements-vehicle.txt" and "source /opt/ros/jazzy/setup.bash" (see the module doc)
    dev_site = Path(sysconfig.get_paths()["purelib"])
    (venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages" /
     "ddrive_deps.pth").write_text(f"import site; site.addsitedir({str(dev_site)!r})\n")
    ros_libs = glob.glob(str(dev_site / "ros_*.libs")) + [str(dev_site.parents[1])]
    base = dict(clean, LD_LIBRARY_PATH=":".join(ros_libs), _ROS_WHEELS_BOOTSTRAP_COMPLETE="1")
    env = _sourced_env(ws / "install" / "setup.bash", base)
    which = _run([str(vpy), "-c", "import ddrive_ros; print(ddrive_ros.__file__)"], env=env, cwd=tmp_path).stdout.strip()
    assert which.startswith(str(install)), which  # the installed package, not the source tree

    bag = write_simple_bag(tmp_path / "bag", duration_s=5.0, start_s=100.0)
    rep = replay(ReplayOptions(bag=bag, out=tmp_path / "out", frames=0, start_node=True,
                               node_executable=[str(script)], node_params_file=params_file, node_env=env,
                               node_params={"num_threads": 1}, domain_id=pid_domain_id(7),
                               discovery_timeout_s=180.0, tail_s=1.0))
    real = [p for p in rep["outputs"]["plans"] if not p["fallback"]]
    assert rep["node_exit_code"] == 0 and len(real) >= 3, (rep["counts"], Path(rep["node_log"]).read_text()[-2000:])
    model = real[0]["model"]
    assert model["checkpoint"] == str(share / "models" / "fast_ddrive_tiny") and not model["random_weights"]
    assert model["decoder"] == "speculative"  # from the installed params file
