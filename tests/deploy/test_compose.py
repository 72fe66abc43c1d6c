"""The deployable stack's files (docs/guides/deploy.md): compose.yaml validated by docker-compose
and read for its shape, deploy/haproxy.cfg (and the docs' TLS lines) checked by haproxy, the
Prometheus and Grafana files, and the Dockerfile's stages and user.

There is no Docker daemon here: nothing is built or started (docs/guides/deploy.md says so)."""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from shoal.config import Settings
from tests.deploy.stack import DEPLOY, ROOT, require_binary

COPIES = ("shoal-1", "shoal-2")
WORKERS = ("worker-1", "worker-2")
SECRETS = {"SHOAL_SECRET_KEY": "test-" + "k" * 48, "POSTGRES_PASSWORD": "test-pg-password",
           "GRAFANA_ADMIN_PASSWORD": "test-grafana-password"}


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text())
    return loaded


def services() -> dict[str, dict[str, Any]]:
    return dict(compose()["services"])


def env_of(service: dict[str, Any]) -> dict[str, Any]:
    env = service.get("environment") or {}
    assert isinstance(env, dict), "environment is written as a mapping"
    return env


def haproxy_lines() -> list[str]:
    return [line.split("#", 1)[0].rstrip() for line in
            (DEPLOY / "haproxy.cfg").read_text().splitlines()]


def haproxy_section(name: str) -> list[str]:
    """The lines of one section (`backend shoal`), without comments and blank lines."""
    lines, inside = [], False
    for line in haproxy_lines():
        if line and not line[0].isspace():
            inside = line.strip() == name
            continue
        if inside and line.strip():
            lines.append(line.strip())
    assert lines, f"no section {name!r} in deploy/haproxy.cfg"
    return lines


def run_compose_config(tmp_path: Path, values: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`docker-compose config` on compose.yaml with only `values` as variables (a clean
    environment, and an env file of our own rather than a developer's `.env`)."""
    binary = require_binary("docker-compose", "docker-compose")
    env_file = tmp_path / "test.env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return subprocess.run(
        [binary, "--env-file", str(env_file), "--project-directory", str(ROOT),
         "-f", str(ROOT / "compose.yaml"), "config"],
        capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path)})


# ---- docker-compose ---------------------------------------------------------------------------


def test_compose_file_validates_with_docker_compose(tmp_path: Path) -> None:
    """`docker-compose config` accepts the file with the three secrets set (worker tokens
    unset: the stack must come up before they can be made), and resolves it to our services."""
    result = run_compose_config(tmp_path, SECRETS)
    assert result.returncode == 0, result.stderr
    resolved = yaml.safe_load(result.stdout)
    assert set(resolved["services"]) == {
        "postgres", "redis", "migrate", *COPIES, "lb", *WORKERS, "prometheus", "grafana",
        "backup", "restore"}
    for name in COPIES:
        env = resolved["services"][name]["environment"]
        assert env["SHOAL_SECRET_KEY"] == SECRETS["SHOAL_SECRET_KEY"]
        assert env["SHOAL_DATABASE_URL"] == (
            f"postgresql://shoal:{SECRETS['POSTGRES_PASSWORD']}@postgres:5432/shoal")
        assert env["SHOAL_INSTANCE_ID"] == name
    assert resolved["services"]["worker-1"]["environment"]["SHOAL_WORKER_TOKEN"] == ""


@pytest.mark.parametrize("missing", sorted(SECRETS))
def test_compose_refuses_to_run_without_a_secret(tmp_path: Path, missing: str) -> None:
    """No secret is committed: each comes from the environment or `.env`, and a missing one
    stops compose with a message naming it."""
    result = run_compose_config(tmp_path, {k: v for k, v in SECRETS.items() if k != missing})
    assert result.returncode != 0
    assert f"set {missing} in .env" in result.stderr, result.stderr


# ---- compose.yaml's shape ---------------------------------------------------------------------


def test_two_copies_share_one_database_redis_key_and_data_volume() -> None:
    """Both copies run `shoal serve --host 0.0.0.0` with the same settings but their instance
    id, on one data volume; the database URL, Redis URL and key are the stack's own."""
    found = {name: s for name, s in services().items()
             if (s.get("command") or [None])[0] == "serve"}
    assert set(found) == set(COPIES)
    envs = {name: env_of(s) for name, s in found.items()}
    for name, service in found.items():
        assert service["command"][:3] == ["serve", "--host", "0.0.0.0"]
        assert envs[name]["SHOAL_INSTANCE_ID"] == name
        assert service["volumes"] == ["shoal-data:/data"]
        assert envs[name]["SHOAL_DATA_DIR"] == "/data"
    first, second = ({k: v for k, v in e.items() if k != "SHOAL_INSTANCE_ID"}
                     for e in envs.values())
    assert first == second
    assert first["SHOAL_DATABASE_URL"].startswith("postgresql://shoal:${POSTGRES_PASSWORD:?")
    assert first["SHOAL_DATABASE_URL"].endswith("@postgres:5432/shoal")
    assert first["SHOAL_REDIS_URL"] == "redis://redis:6379/0"
    assert first["SHOAL_SECRET_KEY"].startswith("${SHOAL_SECRET_KEY:?")
    assert first["SHOAL_READY_WORKERS"] == "0", "workers reach a copy only once it is ready"
    assert services()["migrate"]["command"] == ["db", "upgrade"]
    assert env_of(services()["migrate"]) == first


def test_every_shoal_variable_is_a_real_setting() -> None:
    """Each SHOAL_* variable compose sets is a field of `Settings` (or one of its aliases), and
    the ones the brief names are set: a typo would be ignored silently (extra="ignore")."""
    known = {f"SHOAL_{name.upper()}" for name in Settings.model_fields}
    for field in Settings.model_fields.values():
        alias = field.validation_alias
        known.update(getattr(alias, "choices", []) or [])
    known.add("SHOAL_WORKER_TOKEN")  # `shoal worker --token`'s environment variable
    used: set[str] = set()
    for name, service in services().items():
        for key in env_of(service):
            if key.startswith("SHOAL_"):
                assert key in known, f"{name}: {key} is no setting of src/shoal/config.py"
                used.add(key)
    assert {"SHOAL_DATABASE_URL", "SHOAL_REDIS_URL", "SHOAL_SECRET_KEY", "SHOAL_DATA_DIR",
            "SHOAL_INSTANCE_ID", "SHOAL_READY_WORKERS", "SHOAL_WORKER_TOKEN"} <= used


def test_copies_trust_only_the_load_balancers_address(tmp_path: Path) -> None:
    """The copies believe X-Forwarded-For only from `lb`, whose address is fixed on the
    stack's subnet and outside the range every other container is given; no copy trusts any
    sender ("*") through uvicorn's own variable."""
    result = run_compose_config(tmp_path, SECRETS)
    assert result.returncode == 0, result.stderr
    resolved = yaml.safe_load(result.stdout)
    (pool,) = resolved["networks"]["default"]["ipam"]["config"]
    subnet, others = ipaddress.ip_network(pool["subnet"]), ipaddress.ip_network(pool["ip_range"])
    lb = ipaddress.ip_address(resolved["services"]["lb"]["networks"]["default"]["ipv4_address"])
    assert lb in subnet
    assert lb not in others
    assert others.subnet_of(subnet)  # type: ignore[arg-type]
    for name, service in resolved["services"].items():
        assert "FORWARDED_ALLOW_IPS" not in (service.get("environment") or {}), name
        assert set(service.get("networks") or {"default": None}) == {"default"}, name
    for name in COPIES:
        trusted = resolved["services"][name]["environment"]["SHOAL_TRUSTED_PROXIES"]
        assert Settings(mode="dev", trusted_proxies=trusted).trusted_proxies == str(lb)


def test_two_workers_dial_the_load_balancer_with_their_own_tokens_and_volumes() -> None:
    """Each worker connects through the load balancer, with its token from a variable of its
    own (none committed) and its own volume for its outbox."""
    all_services = services()
    found = {name: s for name, s in all_services.items()
             if (s.get("command") or [None])[0] == "worker"}
    assert set(found) == set(WORKERS)
    tokens, volumes = set(), set()
    for name, service in found.items():
        command = service["command"]
        assert command[command.index("--server") + 1] == "http://lb:8000"
        assert command[command.index("--name") + 1] == name
        token = env_of(service)["SHOAL_WORKER_TOKEN"]
        assert re.fullmatch(r"\$\{SHOAL_WORKER_\d_TOKEN:-\}", token), token
        tokens.add(token)
        volumes.update(service["volumes"])
        assert service["depends_on"]["lb"]["condition"] == "service_healthy"
        assert service["build"]["args"]["WITH_CLIS"] == "${SHOAL_WORKER_CLIS:-1}"
    assert len(tokens) == len(WORKERS)
    assert len(volumes) == len(WORKERS)


def test_health_checks_order_the_start() -> None:
    """Every long-running service but the workers has a health check; each
    `service_healthy` waits on one; the copies check /readyz and wait for the migration."""
    all_services = services()
    checked = {name for name, s in all_services.items()
               if s.get("healthcheck", {}).get("test") and not s["healthcheck"].get("disable")}
    assert checked == {"postgres", "redis", *COPIES, "lb", "prometheus", "grafana"}
    waits = 0
    for name, service in all_services.items():
        for target, rule in (service.get("depends_on") or {}).items():
            assert target in all_services, f"{name} depends on unknown {target}"
            if rule["condition"] == "service_healthy":
                assert target in checked, f"{name} waits for {target}, which has no check"
                waits += 1
    assert waits >= 8
    for name in COPIES:
        service = all_services[name]
        assert "/readyz" in " ".join(service["healthcheck"]["test"])
        assert service["depends_on"]["migrate"] == {
            "condition": "service_completed_successfully"}
        assert service["depends_on"]["postgres"]["condition"] == "service_healthy"
        assert service["depends_on"]["redis"]["condition"] == "service_healthy"
    assert {"shoal-1", "shoal-2"} <= set(all_services["lb"]["depends_on"])


def test_named_volumes_keep_the_state() -> None:
    """PostgreSQL's data, the artifact store, the workers', Prometheus's and Grafana's are named
    volumes, all declared; bind mounts are only the repository's config files."""
    doc = compose()
    declared = set(doc["volumes"])
    assert {"pg-data", "shoal-data", "grafana-data", "prometheus-data"} <= declared
    mounts = {name: s.get("volumes", []) for name, s in doc["services"].items()}
    assert "pg-data:/var/lib/postgresql/data" in mounts["postgres"]
    assert "grafana-data:/var/lib/grafana" in mounts["grafana"]
    used = set()
    for name, entries in mounts.items():
        for entry in entries:
            source = entry.split(":", 1)[0]
            if source.startswith("."):
                assert (ROOT / source).exists() or source == "./backups", (name, entry)
            else:
                assert source in declared, f"{name}: volume {source} is not declared"
                used.add(source)
    assert used == declared


def test_only_the_load_balancer_is_published() -> None:
    """The copies, the database and Redis publish no port; Prometheus and Grafana only on the
    host's loopback."""
    for name, service in services().items():
        for port in service.get("ports", []):
            if name != "lb":
                assert str(port).startswith("127.0.0.1:"), (name, port)
    assert services()["lb"]["ports"] == ["${SHOAL_HTTP_PORT:-8000}:8000"]


def test_env_example_commits_no_secret() -> None:
    """The variables file to copy to `.env` holds no secret, and names every variable compose
    requires."""
    values = {}
    for line in (DEPLOY / "env.example").read_text().splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            values[key] = value
    for key in (*SECRETS, "SHOAL_WORKER_1_TOKEN", "SHOAL_WORKER_2_TOKEN"):
        assert values[key] == "", key
    required = set(re.findall(r"\$\{(\w+):\?", (ROOT / "compose.yaml").read_text()))
    assert required == set(SECRETS)


# ---- the load balancer ------------------------------------------------------------------------


def test_haproxy_backends_are_both_copies_without_stickiness() -> None:
    """HTTP and WebSockets in one http-mode backend listing both copies, health-checked on
    /readyz; no cookie, stick table or hashing; a long tunnel timeout for WebSockets."""
    backend = haproxy_section("backend shoal")
    servers = [line.split()[1:3] for line in backend if line.startswith("server ")]
    assert servers == [[name, f"{name}:8000"] for name in COPIES]
    text = "\n".join(haproxy_lines())
    for sticky in ("cookie", "stick-table", "stick on", "stick match", "balance source",
                   "balance uri", "balance hdr", "hash-type", "balance url_param"):
        assert sticky not in text, sticky
    assert "option httpchk" in backend
    assert any("uri /readyz" in line for line in backend)
    assert "http-check expect status 200" in backend
    defaults = haproxy_section("defaults")
    assert "mode http" in defaults
    tunnel = next(line for line in defaults if line.startswith("timeout tunnel"))
    assert tunnel.split()[-1] in ("1h", "3600s"), tunnel
    assert any("init-addr" in line and "none" in line for line in backend), \
        "names must not have to resolve for haproxy to start (or for `haproxy -c`)"
    # The client's address is the one HAProxy sees, never one the client sent.
    assert "option forwardfor" not in text
    assert backend[1:4] == ["http-request del-header Forwarded",
                            "http-request del-header X-Real-IP",
                            "http-request set-header X-Forwarded-For %[src]"]
    frontend = haproxy_section("frontend public")
    assert "bind :8000" in frontend
    assert "http-request deny deny_status 404 if { path /metrics }" in frontend


def test_haproxy_accepts_the_config(tmp_path: Path) -> None:
    """`haproxy -c` passes; its only warnings are the copies' names not resolving outside the
    compose network (HAProxy resolves them at run time)."""
    binary = require_binary("haproxy", "haproxy")
    result = subprocess.run([binary, "-c", "-f", str(DEPLOY / "haproxy.cfg")],
                            capture_output=True, text=True, timeout=30, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "Configuration file is valid" in output
    warnings = [line for line in output.splitlines() if "[WARNING]" in line]
    assert all("could not resolve address" in w for w in warnings), warnings


def test_haproxy_accepts_the_tls_lines_of_the_docs(tmp_path: Path) -> None:
    """docs/guides/deploy.md's `frontend public` with TLS, put in place of the config's, passes
    `haproxy -c` with a throw-away certificate at the path the docs give."""
    binary = require_binary("haproxy", "haproxy")
    docs = (ROOT / "docs" / "guides" / "deploy.md").read_text()
    (block,) = re.findall(r"```haproxy\n(.*?)```", docs, re.S)
    assert block.startswith("frontend public\n")
    assert "bind :443 ssl crt /usr/local/etc/haproxy/certs/shoal.pem" in block
    pem = tmp_path / "shoal.pem"
    pem.write_bytes(self_signed_pem())
    config, skipping = [], False
    for line in (DEPLOY / "haproxy.cfg").read_text().splitlines():
        if line.startswith("frontend public"):
            config.append(block.replace("/usr/local/etc/haproxy/certs/shoal.pem", str(pem)))
            skipping = True
            continue
        if skipping and line and not line[0].isspace() and not line.startswith("#"):
            skipping = False
        if not skipping:
            config.append(line)
    (tmp_path / "tls.cfg").write_text("\n".join(config) + "\n")
    result = subprocess.run([binary, "-c", "-f", str(tmp_path / "tls.cfg")],
                            capture_output=True, text=True, timeout=30, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "Configuration file is valid" in output


def self_signed_pem() -> bytes:
    """A certificate for shoal.example.com and its key, in one PEM file as HAProxy wants."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "shoal.example.com")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=1))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("shoal.example.com")]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM) + key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption())


# ---- Prometheus and Grafana -------------------------------------------------------------------


def test_prometheus_scrapes_both_copies() -> None:
    """One `shoal` job whose targets are both copies' /metrics (the dashboard selects `job`)."""
    config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "shoal"]
    assert job.get("metrics_path", "/metrics") == "/metrics"
    targets = [t for group in job["static_configs"] for t in group["targets"]]
    assert targets == [f"{name}:8000" for name in COPIES]
    prometheus = services()["prometheus"]
    assert "./deploy/prometheus.yml:/etc/prometheus/prometheus.yml:ro" in prometheus["volumes"]
    assert "--config.file=/etc/prometheus/prometheus.yml" in prometheus["command"]


def test_grafana_is_provisioned_with_the_datasource_and_the_repository_dashboard() -> None:
    """The data source is the stack's Prometheus; the dashboard provider reads the folder where
    compose mounts docs/grafana, whose dashboard's metric names are all in the metrics
    reference (docs/reference/metrics.md, generated from shoal.metrics)."""
    grafana = services()["grafana"]
    mounts = dict(v.rsplit(":", 1)[0].split(":", 1) for v in grafana["volumes"]
                  if v.startswith("./"))
    provisioning = ROOT / "deploy" / "grafana" / "provisioning"
    assert mounts["./deploy/grafana/provisioning"] == "/etc/grafana/provisioning"
    (source,) = yaml.safe_load(
        (provisioning / "datasources" / "prometheus.yaml").read_text())["datasources"]
    assert source["type"] == "prometheus"
    assert source["url"] == "http://prometheus:9090"
    assert source["isDefault"] is True
    (provider,) = yaml.safe_load(
        (provisioning / "dashboards" / "shoal.yaml").read_text())["providers"]
    assert mounts["./docs/grafana"] == provider["options"]["path"]
    dashboards = sorted((ROOT / "docs" / "grafana").glob("*.json"))
    assert dashboards, "the repository's dashboard is docs/grafana/*.json"
    metrics_doc = (ROOT / "docs" / "reference" / "metrics.md").read_text()
    for path in dashboards:
        board = json.loads(path.read_text())
        exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
        assert exprs, path
        for name in set(re.findall(r"\bshoal_[a-z_]+", " ".join(exprs))):
            base = re.sub(r"_(bucket|count|sum)$", "", name)
            assert f"`{base}`" in metrics_doc, f"{path.name}: {name} is not a metric Shoal serves"


# ---- the image --------------------------------------------------------------------------------


def dockerfile() -> list[str]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    joined, current = [], ""
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.lstrip().startswith("#") or not line.strip():
            continue
        current += line.rstrip("\\").strip() + " "
        if not line.endswith("\\"):
            joined.append(current.strip())
            current = ""
    return joined


def test_dockerfile_is_multi_stage_and_runs_as_a_user() -> None:
    """Several stages (a builder, a slim runtime); the last stage runs as a non-root user,
    exposes 8000, checks /readyz and has `shoal` as its entrypoint; the CLIs are off by
    default and pinned as the Makefile pins them."""
    lines = dockerfile()
    stages = [line for line in lines if line.startswith("FROM ")]
    assert len(stages) >= 3
    assert any(line.endswith(" AS builder") for line in stages)
    assert "slim" in " ".join(line for line in lines if line.startswith("ARG PYTHON_IMAGE"))
    last = lines[lines.index(stages[-1]):]
    users = [line.split()[1] for line in last if line.startswith("USER ")]
    assert users, "the last stage sets a USER"
    assert users[-1] not in ("root", "0", "0:0"), users
    assert "EXPOSE 8000" in last
    (health,) = [line for line in last if line.startswith("HEALTHCHECK ")]
    assert "/readyz" in health
    assert 'ENTRYPOINT ["shoal"]' in last
    assert "ARG WITH_CLIS=0" in lines
    makefile = (ROOT / "Makefile").read_text()
    pinned = re.search(r"^CLI_PACKAGES := (.+)$", makefile, re.M)
    assert pinned
    (arg,) = [line for line in lines if line.startswith("ARG CLI_PACKAGES=")]
    assert shlex.split(arg.split("=", 1)[1]) == [" ".join(pinned.group(1).split())]
    assert "--constraint requirements.lock" in " ".join(lines)


def test_dockerignore_keeps_local_state_and_secrets_out() -> None:
    """The build context holds no virtualenv, tools, data, node_modules, caches, tests or
    `.env`."""
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    for entry in (".venv", ".tools", ".shoal", "**/node_modules", "**/__pycache__",
                  ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis", "tests",
                  ".env", ".git"):
        assert entry in ignored, entry
