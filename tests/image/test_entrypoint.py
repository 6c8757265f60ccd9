"""Start-up: user mapping, services on and off, commands, signals, warnings and bad input.

    make test PYTEST_ARGS="tests/image/test_entrypoint.py"
"""
from __future__ import annotations

import os

import pytest

from tests.support.containers import docker, run_container_to_completion
from tests.support.ssh_client import generate_key, public_line

pytestmark = pytest.mark.tier("full")


def error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if "ERROR" in line]


def warning_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if "WARNING" in line]


@pytest.mark.tier("landing")
def test_a_default_start_is_healthy_and_logs_no_warning_or_error(containers):
    container = containers(options=["--env", f"SSH_AUTHORIZED_KEYS={public_line(generate_key())}"])
    container.wait_until_healthy()
    logs = container.logs()
    assert "started: ssh jupyter" in logs
    assert warning_lines(logs) == [] and error_lines(logs) == [], logs
    # The one line that says how the container runs (docs/how-it-runs.md, "The modes").
    assert ("[start] services; dev 1000:1000 from root; auth token; ssh on; jupyter on; gpu exporter off; "
            "own pid namespace; writable root") in logs.splitlines(), logs


def test_the_start_line_says_a_command_under_another_uid_on_a_read_only_root(containers):
    container = containers(command=["sleep", "infinity"], options=["--user", "1234:1234", "--read-only", "--tmpfs", "/tmp",
                                                                    "--tmpfs", "/run/container:mode=1777"])
    container.wait_until_started()
    assert ("[start] command; dev 1234:1234 as --user; auth none; ssh off; jupyter off; gpu exporter off; "
            "own pid namespace; read-only root") in container.logs().splitlines(), container.logs()


@pytest.mark.tier("landing")
def test_a_file_made_in_the_workspace_belongs_to_puid_pgid(containers, tmp_path):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    container = containers(command=["sleep", "infinity"],
                           options=["--env", "PUID=4321", "--env", "PGID=4322", "--volume", f"{workspace}:/workspace"])
    result = container.run("id -u; id -g; touch /workspace/made-inside && echo made")
    assert result.stdout.split() == ["4321", "4322", "made"], result.stdout + result.stderr
    made = workspace / "made-inside"
    assert (made.stat().st_uid, made.stat().st_gid) == (4321, 4322)
    assert container.run("stat -c %u:%g ~ ~/.cache").stdout.split() == ["4321:4322", "4321:4322"]


def test_a_mounted_workspace_of_another_owner_keeps_its_owner_and_gets_one_line(image, tmp_path):
    # Under rootless Podman the host user's own folder shows up as root's: re-owning it locks them out.
    for folder, contents in (("empty", []), ("full", ["notes.txt"])):
        workspace = tmp_path / folder
        workspace.mkdir()
        for name in contents:
            (workspace / name).write_text("mine\n")
        os.chown(workspace, 1234, 1234)
        result = run_container_to_completion(image, command=["true"], options=["--volume", f"{workspace}:/workspace"])
        assert result.returncode == 0, result.stderr
        assert (workspace.stat().st_uid, workspace.stat().st_gid) == (1234, 1234)
        warnings = [line for line in warning_lines(result.stderr) if "/workspace" in line]
        assert len(warnings) == 1 and "not writable for the container user" in warnings[0], result.stderr


def test_puid_taken_by_another_user_of_the_base_is_still_mapped(containers):
    # uid 100 is Debian's sshd and gid 100 the group `users`: sharing them (usermod -o) must still
    # resolve the ids to our user, so `docker exec -u dev` gets dev's HOME.
    container = containers(command=["sleep", "infinity"], options=["--env", "PUID=100", "--env", "PGID=100"])
    assert container.run("id -u; id -g; id -un; echo $HOME; stat -c %u ~").stdout.split() == \
        ["100", "100", "dev", "/home/dev", "100"]


# Ids below 1000 across the system range: free in the image (a Mac's uid 501 and gid 20 is staff there, but
# dialout here; 500, 999) and taken (100 is Debian's sshd, 42 shadow), each with either kind of partner.
@pytest.mark.tier("landing")
@pytest.mark.parametrize("puid, pgid", [("501", "20"), ("500", "999"), ("999", "105"), ("100", "111"),
                                        ("4321", "120"), ("998", "42")])
def test_ids_below_1000_start_whether_or_not_the_image_has_them(image, puid, pgid):
    result = run_container_to_completion(image, command=["bash", "-c", "id -u; id -g; id -un; touch ~/ok && echo ok"],
                                         options=["--env", f"PUID={puid}", "--env", f"PGID={pgid}"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [puid, pgid, "dev", "ok"], result.stdout + result.stderr
    assert error_lines(result.stderr) == [], result.stderr


@pytest.mark.tier("landing")
def test_a_macs_ids_start_the_services_healthy(containers):
    container = containers(options=["--env", "PUID=501", "--env", "PGID=20",
                                    "--env", f"SSH_AUTHORIZED_KEYS={public_line(generate_key())}"])
    container.wait_until_healthy()
    assert "started: ssh jupyter" in container.logs(), container.logs()
    assert container.run("id -u; id -g; stat -c %u:%g ~").stdout.split() == ["501", "20", "501:20"]


def test_a_step_that_fails_unexpectedly_still_ends_start_up_with_one_line_naming_it(image, tmp_path):
    """Whatever set -e ends, start-up says where: a step library planted after the image's own replaces
    one of its functions with a failing command, as a fault of the image would fail."""
    broken = tmp_path / "zz-broken.sh"
    broken.write_text("copy_sample_notebooks() { grep -q no-such-text /etc/hostname; }\n")
    result = run_container_to_completion(
        image, options=["--env", "ENABLE_SSH=0", "--volume", f"{broken}:/usr/local/lib/container/start/zz-broken.sh:ro"])
    assert result.returncode == 1, result.stderr
    errors = error_lines(result.stderr)
    assert len(errors) == 1, result.stderr
    assert "start-up failed (exit status 1) at `grep -q no-such-text /etc/hostname` (start/zz-broken.sh, line 1)" \
        in errors[0] and "report it" in errors[0], errors


@pytest.mark.parametrize("named", [["/usr/local/bin/entrypoint.sh"], ["entrypoint.sh", "/usr/local/bin/entrypoint.sh"]],
                         ids=["by-path", "twice"])
def test_the_entrypoint_named_again_as_the_command_runs_the_command_once(image, named):
    """docker-stacks' tests and some platforms put the entrypoint before the command themselves (before:
    exit 1 and three raw `rm: cannot remove` lines from a second start-up as the user)."""
    result = run_container_to_completion(image, command=[*named, "bash", "-c", "id -un; exit 5"])
    assert result.returncode == 5 and result.stdout.split() == ["dev"], result.stdout + result.stderr
    assert "rm: cannot remove" not in result.stderr and error_lines(result.stderr) == [], result.stderr
    assert result.stderr.count("[start] command;") == 1, result.stderr


@pytest.mark.parametrize("variable, value, message", [
    ("PUID", "abc", "PUID='abc' is not a numeric id"),
    ("PGID", "1000x", "PGID='1000x' is not a numeric id"),
    ("PUID", "0", "PUID=0 would give the container user root's id"),
    ("PUID", "99999999999", "PUID='99999999999' is not an id from 1 to 2147483647"),
    ("PUID", "08", "PUID='08' is not an id from 1 to 2147483647 without leading zeros"),
    ("PGID", "-5", "PGID='-5' is not a numeric id"),
    ("ENABLE_SSH", "maybe", "ENABLE_SSH='maybe' is not a switch"),
    ("ENABLE_JUPYTER", "2", "ENABLE_JUPYTER='2' is not a switch"),
])
def test_bad_input_stops_the_start_with_one_clear_line(image, variable, value, message):
    result = run_container_to_completion(image, command=["true"], options=["--env", f"{variable}={value}"])
    assert result.returncode == 2
    errors = error_lines(result.stderr)
    assert len(errors) == 1 and message in errors[0], result.stderr


@pytest.mark.parametrize("variable, value, owner", [("PGID", "42", "group 'shadow'"), ("PGID", "27", "group 'sudo'"),
                                                    ("PUID", "100", "user '")])
def test_an_id_of_the_images_own_accounts_is_accepted_with_a_warning(image, variable, value, owner):
    result = run_container_to_completion(image, command=["id"], options=["--shm-size=1g", "--env", f"{variable}={value}"])
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if f"{variable}={value} is the image's own" in line]
    assert len(warnings) == 1 and owner in warnings[0], result.stderr


@pytest.mark.tier("landing")
def test_a_command_runs_as_the_user_with_the_environment_and_its_exit_code(image):
    result = run_container_to_completion(image, command=["bash", "-c", "id -un; echo $HOME; command -v torchrun; exit 7"],
                                         options=["--shm-size=1g"])
    assert result.returncode == 7
    user, home, torchrun = result.stdout.split()
    assert (user, home) == ("dev", "/home/dev") and torchrun.endswith("torchrun")


@pytest.mark.flavor_difference
@pytest.mark.tier("landing")
def test_the_bases_ngc_start_up_scripts_still_run(image, flavor):
    if flavor != "gpu":
        pytest.skip("only NGC bases (the GPU flavor) have /opt/nvidia/entrypoint.d")
    listing = run_container_to_completion(image, command=["bash", "-c", "ls /opt/nvidia/entrypoint.d/*.sh | wc -l"])
    assert int(listing.stdout) > 0, "stdout belongs to the command alone"
    # NGC's scripts print the NGC banner; our entrypoint replaced NGC's, so it must source them.
    assert "PyTorch" in listing.stderr, listing.stderr


def test_a_training_only_container_runs_no_service(containers):
    container = containers(options=["--env", "ENABLE_SSH=0", "--env", "ENABLE_JUPYTER=0"])
    container.wait_for_log("no service enabled")
    processes = container.run("ps -eo comm=").stdout.split()
    assert "sshd" not in processes and "jupyter-lab" not in processes
    container.wait_until_healthy()


def test_each_service_can_be_switched_off_alone(containers):
    only_jupyter = containers(options=["--env", "ENABLE_SSH=0"])
    only_jupyter.wait_until_healthy()
    processes = only_jupyter.run("ps -eo comm=").stdout.split()
    assert "sshd" not in processes and "jupyter-lab" in processes


def test_any_uid_gets_a_passwd_entry_and_a_home(image):
    result = run_container_to_completion(
        image, options=["--user", "54321:54321", "--shm-size=1g"],
        command=["python", "-c", "import getpass, os, pwd; p = pwd.getpwuid(os.getuid()); "
                                 "print(getpass.getuser(), p.pw_dir, os.access(os.environ['HOME'], os.W_OK))"])
    assert result.returncode == 0, result.stderr
    user, home, writable = result.stdout.split()
    # /home/dev belongs to uid 1000, so an unknown uid gets a writable home of its own.
    assert (user, home, writable) == ("dev", "/tmp/home-54321", "True")


def test_a_fallback_home_that_someone_else_made_first_stops_the_start_with_one_line(image, tmp_path):
    """/tmp is everyone's: a /tmp/home-UID made by another user (here root) must not become UID's home."""
    planted = tmp_path / "planted"
    planted.mkdir(mode=0o777)
    result = run_container_to_completion(
        image, command=["true"],
        options=["--user", "54321:54321", "--shm-size=1g", "--volume", f"{planted}:/tmp/home-54321"])
    assert result.returncode == 2, result.stderr
    errors = error_lines(result.stderr)
    assert len(errors) == 1 and "/tmp/home-54321 is not a folder of uid 54321" in errors[0], result.stderr


def test_docker_stop_ends_the_services_in_time_with_exit_0(containers):
    container = containers(options=["--env", "SSH_AUTHORIZED_KEYS="])
    container.wait_until_healthy()
    docker("stop", "--time", "30", container.name, timeout=60)
    # A process that ignored SIGTERM would be killed at the end of the grace period: exit 137, not 0.
    assert container.state()["ExitCode"] == 0, container.logs()
    assert "stopped cleanly" in container.logs()


@pytest.mark.parametrize("shm_size", ["64m", "512m"])  # Docker's default, and under doctor's 1 GiB
def test_a_small_dev_shm_is_warned_about_with_doctors_threshold_and_fix(image, shm_size):
    result = run_container_to_completion(image, command=["true"], options=[f"--shm-size={shm_size}"])
    warnings = [line for line in result.stderr.splitlines() if "/dev/shm" in line]
    assert len(warnings) == 1 and "under 1 GiB" in warnings[0], result.stderr
    assert "fix: docker run --shm-size=16g, or --ipc=host" in warnings[0], result.stderr


def test_a_limited_memlock_is_warned_about_only_where_rdma_devices_are(image):
    limited = ["--shm-size=1g", "--ulimit", "memlock=65536:65536"]
    # /dev/infiniband is where RDMA devices appear; an empty folder there is enough for the start-up check.
    with_rdma = run_container_to_completion(image, command=["true"], options=[*limited, "--tmpfs", "/dev/infiniband"])
    warnings = [line for line in with_rdma.stderr.splitlines() if "memlock" in line]
    assert len(warnings) == 1 and "--ulimit memlock=-1" in warnings[0], with_rdma.stderr
    without_rdma = run_container_to_completion(image, command=["true"], options=limited)
    assert "memlock" not in without_rdma.stderr, without_rdma.stderr


def test_a_stranger_uid_in_group_0_gets_a_home_of_its_own_not_the_users(containers):
    """`docker exec --user 54321` (group 0) could write the image's group-0 home, and its caches there,
    mode 755, then kept dev's torch.compile and user-packages out (also on a kept cache volume)."""
    container = containers(command=["sleep", "infinity"], options=["--shm-size=1g"])
    container.wait_until_started()
    assert container.run("bash -lc 'echo $HOME'", user="54321").stdout.split()[-1] == "/tmp/home-54321"
    assert container.run("find ~ -user 54321 | head -3").stdout == ""
    assert container.run("bash -lc 'echo $HOME'").stdout.split()[-1] == "/home/dev"


def test_the_uid_the_work_runs_as_keeps_the_shared_home_in_its_exec_sessions(containers):
    """OpenShift's way: an arbitrary uid in group 0 runs the container, and `oc exec` comes as that uid."""
    container = containers(command=["sleep", "infinity"], options=["--user", "1000650000:0", "--shm-size=1g"])
    container.wait_until_started()
    assert container.run("bash -lc 'echo $HOME'", user="1000650000:0").stdout.split()[-1] == "/home/dev"


def test_a_login_shell_of_docker_exec_under_any_uid_gets_its_writable_home(containers):
    """`docker exec --user UID:GID` gets HOME=/, which that uid cannot write: a login shell there uses the
    home start-up gave the uid, so user-packages sets up its environment instead of falling back."""
    container = containers(command=["sleep", "infinity"], options=["--user", "54321:54321", "--shm-size=1g"])
    container.wait_until_started()
    assert container.run("echo $HOME", user="54321:54321").stdout.strip() == "/"  # what docker exec gives
    shell = container.run("bash -lc 'echo home=$HOME; test -w $HOME && echo writable=yes; "
                          "echo python=$(command -v python)'", user="54321:54321")
    said = dict(line.split("=", 1) for line in shell.stdout.splitlines() if "=" in line)
    assert (said.get("home"), said.get("writable")) == ("/tmp/home-54321", "yes"), shell.stdout + shell.stderr
    assert said["python"].startswith("/tmp/home-54321/.cache/user-packages/"), shell.stdout + shell.stderr
    assert "cannot set up" not in shell.stderr, shell.stderr

    # A uid start-up never saw gets its home made now; one whose /tmp/home-UID someone planted (a link to
    # a folder of theirs) keeps HOME=/ rather than writing where the planter reads.
    assert container.run("bash -lc 'echo $HOME'", user="23456:23456").stdout.split()[-1] == "/tmp/home-23456"
    assert container.run("mkdir /tmp/planted && ln -s /tmp/planted /tmp/home-34567", user="root").rc == 0
    assert container.run("bash -lc 'echo $HOME'", user="34567:34567").stdout.split()[-1] == "/"
