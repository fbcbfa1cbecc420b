"""Current ClickHouse for the fleet tests: the engine of ClickHouse 26.x run
in-process by chdb-core (PyPI), behind an HTTP front of this module's own that
speaks ClickHouse's HTTP interface, so that tcpscope (`compare --clickhouse`)
and the tests talk to it as to a server.

Why: the only ClickHouse server a registry here serves is Debian 12's 18.16
(servers.ClickHouseServer, which the Kafka-engine tests keep using). chdb-core
is the engine of clickhouse-local: parser, MergeTree, materialized views,
functions, formats and their default settings are ClickHouse's own. Its Kafka
engine cannot be counted on, so a test gives the Kafka tables another engine.

scripts/dev.sh test pip-installs the pinned chdb-core into BUILD/python
(BUILD: $TCPSCOPE_BUILD, else build/), where this module looks for it.

The front (a ThreadingHTTPServer on 127.0.0.1, an ephemeral port) passes each
query to the engine untouched and answers with the engine's output bytes:
  GET or POST /?query=SQL  the query; a POST body follows it after a newline
                           (an INSERT's rows), or is the whole query
  database=DB              the current database while the query runs
  default_format=F         the output format when the query names none
                           (else TabSeparated, as the server)
  credentials              HTTP basic auth, X-ClickHouse-User/-Key headers or
                           user=/password=; anything but the front's user and
                           password is refused (516 AUTHENTICATION_FAILED)
  GET /ping                "Ok.\\n"
An error answers with the engine's exception text ("Code: N. DB::Exception:
...") and X-ClickHouse-Exception-Code, with the HTTP status the server gives
the codes met here (400 syntax, 403 authentication, 404 unknown table,
database or setting), else 500. Not served: settings as URL parameters
(refused with 115 UNKNOWN_SETTING rather than ignored), compression, HTTP
sessions, and the read-only mode the server puts a GET in. The engine runs
one query at a time.
"""
from __future__ import annotations

import base64
import http.server
import os
import re
import sys
import threading
import urllib.parse
from pathlib import Path

from servers import HOST, ClickHouseHttp, ServerError, _Server

ROOT = Path(__file__).resolve().parents[2]
PYTHON_DIR = Path(os.environ.get("TCPSCOPE_BUILD", ROOT / "build")) / "python"

# The status ClickHouse's server answers these exception codes with
# (src/Server/HTTP/exceptionCodeToHTTPStatus.cpp); any other is 500.
_HTTP_STATUS = {62: 400, 516: 403, 60: 404, 81: 404, 115: 404}
_CODE = re.compile(r"^Code: (\d+)\.")
_PARAMS = {"query", "database", "default_format", "user", "password"}


def import_chdb():
    """chdb-core's module, from BUILD/python if it is not on the path already.
    Raises ServerError saying how to install it."""
    if PYTHON_DIR.is_dir() and str(PYTHON_DIR) not in sys.path:
        sys.path.append(str(PYTHON_DIR))
    try:
        import chdb
        from chdb.session import Session  # noqa: F401
    except ImportError as e:
        raise ServerError(f"chdb-core is not importable ({e}): scripts/dev.sh test installs it into "
                          f"{PYTHON_DIR} (python3 -m pip install --no-deps --target {PYTHON_DIR} "
                          f"chdb-core==VERSION, VERSION as pinned in scripts/dev.sh)") from None
    return chdb


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_FrontServer"

    def do_GET(self):
        self._serve(b"")

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        self._serve(self.rfile.read(length) if length else b"")

    def _serve(self, body: bytes):
        url = urllib.parse.urlsplit(self.path)
        params = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        if url.path == "/ping" or (url.path == "/" and not params and not body):
            return self._answer(200, b"Ok.\n")
        front = self.server.front
        user, password = self._credentials(params)
        if (user, password) != (front.user, front.password):
            return self._error(f"Code: 516. DB::Exception: {user}: Authentication failed: password is incorrect, "
                               f"or there is no user with such name. (AUTHENTICATION_FAILED)")
        unknown = sorted(set(params) - _PARAMS)
        if unknown:
            return self._error(f"Code: 115. DB::Exception: this HTTP front takes no settings as URL parameters: "
                               f"{', '.join(unknown)}. (UNKNOWN_SETTING)")
        sql = params.get("query", "")
        if body:
            sql = sql + "\n" + body.decode("utf-8", "surrogateescape") if sql else body.decode("utf-8", "surrogateescape")
        try:
            out = front.run(sql, params.get("database"), params.get("default_format", "TabSeparated"))
        except Exception as e:  # noqa: BLE001 - the engine's exception is the answer
            return self._error(str(e))
        self._answer(200, out)

    def _credentials(self, params):
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Basic "):
            user, _, password = base64.b64decode(auth[6:]).decode().partition(":")
            return user, password
        if self.headers.get("X-ClickHouse-User") is not None:
            return self.headers["X-ClickHouse-User"], self.headers.get("X-ClickHouse-Key", "")
        return params.get("user", "default"), params.get("password", "")

    def _error(self, text: str):
        m = _CODE.match(text)
        code = int(m.group(1)) if m else 0
        self._answer(_HTTP_STATUS.get(code, 500), text.encode() + b"\n", {"X-ClickHouse-Exception-Code": str(code)})

    def _answer(self, status: int, body: bytes, headers=None):
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class _FrontServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    front: "ChdbClickHouse"


class ChdbClickHouse(ClickHouseHttp, _Server):
    """chdb-core's engine with its data in the temp dir (MergeTree parts and
    the catalog persist across queries), served on `http_url`. stop() stops
    the front and closes the engine."""

    name = "chdb"

    def __init__(self, user: str = "default", password: str = "", workdir=None, keep: bool = False):
        super().__init__(workdir, keep)
        self.user, self.password = user, password
        self._session = None
        self._httpd = None
        self._lock = threading.Lock()
        self.engine_version = None
        self.package_version = None

    @property
    def http_url(self) -> str:
        return f"http://{HOST}:{self._httpd.server_port}/"

    def running(self) -> bool:
        return self._httpd is not None

    def start(self) -> None:
        if self.running():
            return
        chdb = import_chdb()
        from chdb.session import Session
        self._session = Session(str(self.dir / "data"))
        # clickhouse-local's one difference from a server's defaults that a
        # query could notice: a bare expression is not a query on a server.
        self._session.query("SET implicit_select = 0")
        self.package_version = chdb.__version__
        self.engine_version = self.run("SELECT version()", None, "TabSeparated").decode().strip()
        self._httpd = _FrontServer((HOST, 0), _Handler)
        self._httpd.front = self
        threading.Thread(target=self._httpd.serve_forever, name="chdb-front", daemon=True).start()

    def run(self, sql: str, database: str | None, default_format: str) -> bytes:
        """One query on the engine, its output as the server would send it."""
        with self._lock:
            if database:
                self._session.query(f"USE `{database}`")
            try:
                return self._session.query(sql, default_format).bytes()
            finally:
                if database:
                    self._session.query("USE default")

    def stop(self) -> None:
        try:
            if self._httpd is not None:
                self._httpd.shutdown()
                self._httpd.server_close()
                self._httpd = None
        finally:
            if self._session is not None:
                self._session.close()
                self._session = None
