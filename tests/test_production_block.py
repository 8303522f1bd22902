"""The README's production block, run as written, and what it relies on: the
production profile refuses the offline demo model unless the install config
enables it on that provider."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from owlai.install_config import InstallConfigError, parse_install_config, production_demo_problem

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "owlai.example.toml"
DEMO = '[[providers]]\nname = "demo"\nkind = "offline-demo"\ntier = "private"\nmodels = ["owlai-offline-demo"]\n'


def manage_check(config: Path, *, production: bool) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_URL", "REDIS_URL", "OWLAI_"))}
    env.update(OWLAI_CONFIG=str(config), SECRET_KEY="x")
    if production:
        # Settings refuse before any connection is made: the database need not exist.
        env.update(DATABASE_URL="postgres://nobody@127.0.0.1:1/none", REDIS_URL="redis://127.0.0.1:1/0")
    else:
        env["OWLAI_VAR_DIR"] = str(config.parent / "var")
    return subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def test_production_refuses_the_example_configs_demo_model(tmp_path):
    result = manage_check(EXAMPLE, production=True)
    assert result.returncode != 0
    output = result.stderr + result.stdout
    assert str(EXAMPLE) in output  # the file
    assert "allow_in_production = true" in output  # the key that enables it
    assert "offline demo" in output


def test_the_flag_on_the_demo_provider_lets_production_start(tmp_path):
    config = tmp_path / "owlai.toml"
    config.write_text(
        EXAMPLE.read_text().replace('kind = "offline-demo"\n', 'kind = "offline-demo"\nallow_in_production = true\n')
    )
    result = manage_check(config, production=True)
    assert "allow_in_production" not in result.stderr + result.stdout
    assert "System check identified no issues" in result.stdout, result.stderr


def test_the_embedded_profile_keeps_the_example_config(tmp_path):
    result = manage_check(EXAMPLE, production=False)
    assert result.returncode == 0, result.stderr


def test_the_flag_applies_to_the_demo_provider_only():
    assert production_demo_problem(parse_install_config(DEMO)) is not None
    assert (
        production_demo_problem(parse_install_config(DEMO.replace("models", "allow_in_production = true\nmodels")))
        is None
    )
    openai = '[[providers]]\nname = "p"\nkind = "openai"\ntier = "private"\nbase_url = "http://m/v1"\nmodels = ["m"]\n'
    assert production_demo_problem(parse_install_config(openai)) is None
    with pytest.raises(InstallConfigError, match="allow_in_production"):
        parse_install_config(openai.replace("models", "allow_in_production = true\nmodels"))
    with pytest.raises(InstallConfigError, match="true or false"):
        parse_install_config(DEMO.replace("models", 'allow_in_production = "yes"\nmodels'))


# --- The README's block, run as written -------------------------------------------

BLOCK_START, BLOCK_END = "<!-- production-block:start -->", "<!-- production-block:end -->"
SERVICES_MARKER = "# 4. The services"
PG_SUPERUSER = {"PGHOST": "127.0.0.1", "PGPORT": "5432", "PGUSER": "postgres"}
ANSWER = "Production block answer."
# Run in the block's environment: the purge connects as the retention role.
PURGE = (
    "import psycopg; from django.conf import settings; from audit.retention import purge_expired; purge_expired(); "
    "print('purged as', psycopg.connect(settings.OWLAI_RETENTION_DATABASE_URL).execute('SELECT current_user')"
    ".fetchone()[0])"
)


def readme_block() -> tuple[str, list[str]]:
    """The README's block split into its set-up script and its service lines."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme[readme.index(BLOCK_START) + len(BLOCK_START) : readme.index(BLOCK_END)]
    body = block.strip().removeprefix("```sh").removesuffix("```").strip("\n")
    setup, services = body.split(SERVICES_MARKER)
    lines = [line for line in services.splitlines()[1:] if line.strip() and not line.startswith("#")]
    return setup, lines


def psql_admin(sql: str) -> None:
    env = {**os.environ, **PG_SUPERUSER}
    subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", "postgres", "-c", sql], env=env, check=True)


def scram_matches(verifier: str, password: str) -> bool:
    """Whether a PostgreSQL SCRAM-SHA-256 verifier was made from `password`
    (RFC 5802: StoredKey = H(HMAC(SaltedPassword, "Client Key"))). The server
    here trusts loopback, so this is how the test sees the passwords were set."""
    import base64
    import hashlib
    import hmac

    method, rest = verifier.split("$", 1)
    iterations_salt, keys = rest.split("$")
    iterations, salt = iterations_salt.split(":")
    stored_key = keys.split(":")[0]
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), base64.b64decode(salt), int(iterations))
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    return method == "SCRAM-SHA-256" and hashlib.sha256(client_key).digest() == base64.b64decode(stored_key)


class Services:
    """The block's long-running lines, each started as written in its own
    process group (with the environment the set-up part exported) and
    stopped by its PID."""

    def __init__(self, tmp: Path, env: dict[str, str], env_dump: Path) -> None:
        self.tmp, self.env, self.env_dump = tmp, env, env_dump
        self.procs: list[subprocess.Popen] = []

    def start(self, line: str) -> subprocess.Popen:
        log = self.tmp / f"service-{len(self.procs)}.log"
        proc = subprocess.Popen(
            ["bash", "-c", f'source "{self.env_dump}" && exec {line}'],
            cwd=ROOT,
            env=self.env,
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        proc.log = log  # type: ignore[attr-defined]
        self.procs.append(proc)
        return proc

    def logs(self) -> str:
        return "\n".join(f"--- {p.args[-1][-200:]}\n{p.log.read_text()[-4000:]}" for p in self.procs)

    def stop(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


def admin_connection():
    import psycopg

    dsn = f"postgresql://{PG_SUPERUSER['PGUSER']}@{PG_SUPERUSER['PGHOST']}:{PG_SUPERUSER['PGPORT']}/postgres"
    return psycopg.connect(dsn, autocommit=True)


def drop_install(db: str, roles: list[str]) -> None:
    from psycopg import sql

    with admin_connection() as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)))
        for role in roles:  # cluster-wide; their grants went with the database
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def login(http, username: str, password: str) -> str:
    """Logs in through the admin login form; returns the login page's HTML."""
    page = http.get("/admin/login/")
    assert page.status_code == 200
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    response = http.post(
        "/admin/login/?next=/admin/",
        data={"username": username, "password": password, "csrfmiddlewaretoken": token, "next": "/admin/"},
        headers={"Referer": f"{http.base_url}admin/login/"},
    )
    assert response.status_code == 302 and response.headers["location"] == "/admin/", response.text[:2000]
    return page.text


def completed_turn(port: int, conversation_id: str, session: str, text: str) -> list[dict]:
    """Frames of one turn started over the websocket, up to its `turn.finished`."""
    from websockets.sync.client import connect

    frames: list[dict] = []
    deadline = time.monotonic() + 90
    with connect(
        f"ws://127.0.0.1:{port}/ws/chat/{conversation_id}/",
        additional_headers={"Cookie": f"sessionid={session}"},
        origin=f"http://127.0.0.1:{port}",
        open_timeout=10,
    ) as ws:
        ws.send(json.dumps({"type": "turn.start", "text": text, "model": "inhouse-model"}))
        while time.monotonic() < deadline:
            try:
                frame = json.loads(ws.recv(timeout=2))
            except TimeoutError:
                continue
            frames.append(frame)
            if frame.get("type") == "turn.finished":
                return frames
    raise AssertionError(f"no turn.finished within 90 s: {frames}")


@pytest.mark.services
@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_the_readme_production_block_installs_a_working_stack(tmp_path, require_postgres_app_db, require_redis):
    import httpx
    from django.conf import settings

    from tests.support.fake_llm import FakeLLMServer, text
    from tests.support.stack import free_port, wait_for_port

    setup, service_lines = readme_block()
    assert len(service_lines) == 3 and [line.split()[0] for line in service_lines] == [
        ".venv/bin/daphne",
        ".venv/bin/celery",
        ".venv/bin/celery",
    ]
    run_id = uuid.uuid4().hex[:10]
    db = f"owlai_block_{run_id}"
    roles = {kind: f"{db}_{kind}" for kind in ("owner", "app", "retention")}
    passwords = {kind: secrets.token_hex(16) for kind in roles}
    admin_password = secrets.token_urlsafe(16)
    port = free_port()
    fake = FakeLLMServer([text(ANSWER)] * 10).__enter__()
    config = tmp_path / "owlai.toml"
    config.write_text(
        f'[[providers]]\nname = "onprem"\nkind = "openai"\ntier = "private"\nbase_url = "{fake.base_url}"\n'
        'models = ["inhouse-model"]\n'
    )
    # Only what an operator sets: nothing of the suite's own database, role
    # check switch or settings module leaks into the block.
    inherited = ("DATABASE_URL", "REDIS_URL", "OWLAI_", "SECRET_KEY", "DJANGO_", "PG", "DB_CONN")
    env = {k: v for k, v in os.environ.items() if not k.startswith(inherited)}
    env.update(
        PG_SUPERUSER,
        OWLAI_DB=db,
        OWLAI_OWNER_ROLE=roles["owner"],
        OWLAI_APP_ROLE=roles["app"],
        OWLAI_RETENTION_ROLE=roles["retention"],
        OWLAI_OWNER_PASSWORD=passwords["owner"],
        OWLAI_APP_PASSWORD=passwords["app"],
        OWLAI_RETENTION_PASSWORD=passwords["retention"],
        SECRET_KEY=secrets.token_urlsafe(40),
        REDIS_URL=settings.REDIS_URL,
        OWLAI_CONFIG=str(config),
        ALLOWED_HOSTS="127.0.0.1",
        DJANGO_SUPERUSER_USERNAME="block-admin",
        DJANGO_SUPERUSER_EMAIL="block-admin@example.com",
        DJANGO_SUPERUSER_PASSWORD=admin_password,
        OWLAI_BIND="127.0.0.1",
        OWLAI_PORT=str(port),
        OWLAI_BEAT_SCHEDULE=str(tmp_path / "celerybeat-schedule"),
        OWLAI_STATIC_ROOT=str(tmp_path / "static"),
        # Other tests share this Redis database: a queue and channel prefix of its own.
        OWLAI_CELERY_QUEUE=f"owlai-block-{run_id}",
        OWLAI_CHANNEL_PREFIX=f"owlai-block-{run_id}",
        PYTHONUNBUFFERED="1",
    )
    env_dump = tmp_path / "block.env"
    script = tmp_path / "block.sh"
    # The set-up part as written, then its exported environment for the services.
    script.write_text(f'{setup}\nexport -p > "{env_dump}"\n')
    services = Services(tmp_path, env, env_dump)
    try:
        result = subprocess.run(["bash", str(script)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, f"block failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
        assert "password set from $OWLAI_APP_PASSWORD" in result.stdout
        # Step 2 again, as after an upgrade: the roles exist, their passwords are set anew.
        prelude, rest = setup.split("# 1.")
        step2 = "# 2." + rest.split("# 2.")[1].split("# 3.")[0]
        rerun = subprocess.run(
            ["bash", "-c", prelude + step2], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
        )
        assert rerun.returncode == 0, rerun.stderr[-4000:]
        assert f"Role {roles['app']}: already existed, attributes left unchanged; password set" in rerun.stdout
        web = services.start(service_lines[0])
        wait_for_port(port, web, web.log, timeout=60)
        for line in service_lines[1:]:
            services.start(line)

        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=20) as http:
            login_page = login(http, "block-admin", admin_password)
            admin_page = http.get("/admin/")
            assert admin_page.status_code == 200 and "block-admin" in admin_page.text

            # Static files, from daphne itself: the login page's own stylesheet.
            stylesheet = re.search(r'href="(/static/[^"]+\.css)"', login_page).group(1)
            css = http.get(stylesheet)
            assert css.status_code == 200 and css.content
            assert css.content == (tmp_path / "static" / stylesheet.removeprefix("/static/")).read_bytes()
            script_file = http.get("/static/chat/render.js")
            assert script_file.status_code == 200
            assert script_file.content == (ROOT / "chat" / "static" / "chat" / "render.js").read_bytes()

            created = http.post(
                "/api/conversations/",
                json={"title": "Production block"},
                headers={"X-CSRFToken": http.cookies["csrftoken"], "Referer": f"http://127.0.0.1:{port}/"},
            )
            assert created.status_code == 201, created.text
            frames = completed_turn(port, created.json()["id"], http.cookies["sessionid"], "Hello")
        assert frames[-1]["status"] == "completed", frames
        assert ANSWER in json.dumps(frames, ensure_ascii=False)
        assert fake.requests, "the turn reached the model server"
        assert all(proc.poll() is None for proc in services.procs), "web, worker and beat still run"

        # The retention role's connection (OWLAI_RETENTION_DATABASE_URL) may purge.
        purge = subprocess.run(
            ["bash", "-c", f'source "{env_dump}" && exec .venv/bin/python manage.py shell -c "{PURGE}"'],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert purge.returncode == 0 and f"purged as {roles['retention']}" in purge.stdout, purge.stderr[-3000:]

        with admin_connection() as conn:
            verifiers = dict(
                conn.execute(
                    "SELECT rolname, rolpassword FROM pg_authid WHERE rolname = ANY(%s)", [list(roles.values())]
                ).fetchall()
            )
            users = {row[0] for row in conn.execute("SELECT usename FROM pg_stat_activity WHERE datname = %s", [db])}
            owner = conn.execute("SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = %s", [db]).fetchone()[
                0
            ]
        # Every role has its password (the server trusts loopback here, so the
        # verifiers are compared instead of logging in with them).
        assert all(scram_matches(verifiers[roles[k]], passwords[k]) for k in roles), verifiers
        assert owner == roles["owner"]
        # The services run as the application role, never as the owner.
        assert roles["app"] in users and roles["owner"] not in users, users
    except BaseException:
        print(services.logs())
        raise
    finally:
        services.stop()
        fake.__exit__(None, None, None)
        drop_install(db, list(roles.values()))


# --- deploy/: the systemd units run what the block runs ----------------------------

DEPLOY = ROOT / "deploy"
UNITS = ("owlai-web.service", "owlai-worker@.service", "owlai-beat.service")
INSTALL_DIR = "/opt/owlai/"


def exec_start(unit: str) -> str:
    (line,) = [line for line in (DEPLOY / unit).read_text().splitlines() if line.startswith("ExecStart=")]
    return line.removeprefix("ExecStart=")


def normalized(command: str) -> list[str]:
    """A command's words, with the unit's install directory, its ${NAME} and the
    block's "$NAME" written alike, and the worker template's node name left out."""
    import shlex

    words = shlex.split(command.replace(INSTALL_DIR, "").replace("${", "$").replace("}", ""), comments=True)
    if "-n" in words:
        index = words.index("-n")
        del words[index : index + 2]
    return words


def test_the_units_run_the_blocks_service_lines():
    _setup, service_lines = readme_block()
    assert [normalized(exec_start(unit)) for unit in UNITS] == [normalized(line) for line in service_lines]
    assert "%i@%H" in exec_start("owlai-worker@.service")  # each instance its own Celery node name


def test_the_env_example_sets_what_the_services_read():
    example = (DEPLOY / "owlai.env.example").read_text()
    names = {line.split("=", 1)[0] for line in example.splitlines() if line and not line.startswith("#")}
    setup, service_lines = readme_block()
    exported = set(re.findall(r"^export (\w+)=", setup, re.MULTILINE))
    used = {word[1:] for line in service_lines for word in normalized(line) if word.startswith("$")}
    assert exported == {"DATABASE_URL", "OWLAI_RETENTION_DATABASE_URL", "OWLAI_DB_POOL_SIZE"}
    assert used == {"OWLAI_BIND", "OWLAI_PORT", "OWLAI_BEAT_SCHEDULE"}
    required = {"REDIS_URL", "SECRET_KEY", "OWLAI_CONFIG", "ALLOWED_HOSTS", "OWLAI_STATIC_ROOT", "OWLAI_VAR_DIR"}
    assert exported | used | required <= names
    assert "owlai_owner" not in example  # services never connect as the owner


def test_systemd_accepts_the_units(tmp_path):
    """`systemd-analyze verify` on the units as installed in this checkout:
    unknown keys, bad values and a command that is not executable fail it."""
    for unit in UNITS:
        text = (DEPLOY / unit).read_text().replace(INSTALL_DIR, f"{ROOT}/")
        (tmp_path / unit.replace("@.", "@1.")).write_text(text)
        if "@" in unit:
            (tmp_path / unit).write_text(text)  # the template the instance comes from
    instances = [str(tmp_path / unit.replace("@.", "@1.")) for unit in UNITS]
    result = subprocess.run(["systemd-analyze", "verify", *instances], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and not (result.stdout + result.stderr).strip(), result.stdout + result.stderr


# --- audit_db_setup: passwords from the environment, never from the command line ----


@pytest.mark.django_db
def test_audit_db_setup_reads_passwords_only_from_named_environment_variables(monkeypatch, require_postgres_app_db):
    from io import StringIO

    from django.core.management import CommandError, call_command

    roles = {"app_role": "owlai_block_app_x", "retention_role": "owlai_block_retention_x"}
    with pytest.raises(CommandError, match="not set or empty"):
        call_command("audit_db_setup", **roles, app_password_env="OWLAI_BLOCK_UNSET_PASSWORD")
    with pytest.raises(CommandError, match="not an environment variable name"):
        call_command("audit_db_setup", **roles, retention_password_env="s3cret-pass!")
    monkeypatch.setenv("OWLAI_BLOCK_APP_PASSWORD", "the-app-password")
    out = StringIO()
    call_command("audit_db_setup", **roles, app_password_env="OWLAI_BLOCK_APP_PASSWORD", print_sql=True, stdout=out)
    assert "PASSWORD <SCRAM verifier of $OWLAI_BLOCK_APP_PASSWORD>" in out.getvalue()
    assert "the-app-password" not in out.getvalue()
