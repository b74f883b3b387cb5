"""A Hugging Face Hub-compatible HTTP server for the tests, on 127.0.0.1.

It serves fixture repositories with the endpoints huggingface_hub 2.x uses and the headers it relies on:

- ``GET /api/models/{repo}`` and ``/api/models/{repo}/revision/{rev}`` (``?blobs=True`` adds sizes, blob ids and LFS
  info): the model info, with the commit ``sha`` and the ``siblings``; ``/api/models/{repo}/tree/{rev}``: the file
  listing ``snapshot_download`` reads; ``/api/agent-harnesses``, which huggingface_hub fetches once a day;
- ``HEAD``/``GET /{repo}/resolve/{rev}/{path}``: regular files with ``ETag``, ``X-Repo-Commit``, ``Content-Length``
  and byte ranges; LFS files (safetensors, bin, gguf) answer ``302`` to a second server standing in for the CDN, with
  ``X-Linked-Etag`` (the sha256) and ``X-Linked-Size``, as the real hub does;
- errors with the ``X-Error-Code`` header that ``hf_raise_for_status`` reads: ``RepoNotFound`` (401 without a token,
  404 with one), ``RevisionNotFound``, ``EntryNotFound``, ``GatedRepo`` (401/403).

It counts the body bytes it sends per repository file and records every request, so tests can assert what a command
transferred. Faults can be injected per file: a server error, a connection dropped mid-body, a wrong announced size.
Hostile modes stand in for a hub that means harm or is broken: a model description that is not one
(:meth:`FakeHub.answer_model_info`), answers dripped a byte at a time until the client gives up, a file that the
listing calls 1 KiB and that then arrives by the hundreds of megabytes.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth", ".h5", ".msgpack", ".onnx")
CHUNK = 1 << 16
DRIP_INTERVAL = 0.25  # seconds between the bytes of a dripped answer
FLOOD_LISTED = 1024  # what the listing and the HEAD answer say a flooded file holds
FLOOD_BYTES = 300 * 1024 * 1024  # what a flooded file's GET then sends (unless the client stops reading)


@dataclass(frozen=True)
class Blob:
    path: Path | None
    data: bytes | None
    size: int
    git_sha: str  # git blob id, the ETag of a regular file
    sha256: str

    def read(self, start: int, end: int) -> bytes:
        if self.data is not None:
            return self.data[start:end]
        with open(self.path, "rb") as handle:
            handle.seek(start)
            return handle.read(end - start)


def _blob(content: bytes | Path) -> Blob:
    git = hashlib.sha1()
    sha = hashlib.sha256()
    if isinstance(content, Path):
        size = content.stat().st_size
        git.update(f"blob {size}\0".encode())
        with open(content, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                git.update(chunk)
                sha.update(chunk)
        return Blob(content, None, size, git.hexdigest(), sha.hexdigest())
    git.update(f"blob {len(content)}\0".encode() + content)
    sha.update(content)
    return Blob(None, bytes(content), len(content), git.hexdigest(), sha.hexdigest())


@dataclass
class Repo:
    repo_id: str
    files: dict[str, Blob]
    commit: str
    refs: dict[str, str]  # branch/tag -> commit
    token: str | None = None  # private: only this bearer token may read it
    gated: bool = False  # gated: model info is public, files need access (no token has it here)

    @staticmethod
    def is_lfs(name: str) -> bool:
        return name.lower().endswith(LFS_SUFFIXES)


@dataclass
class Request:
    method: str
    path: str
    range: str | None
    status: int
    authorized: bool
    server: str  # "hub" or "cdn"


@dataclass
class FakeHub:
    repos: dict[str, Repo] = field(default_factory=dict)
    served: Counter = field(default_factory=Counter)  # (repo_id, file) -> body bytes sent
    requests: list[Request] = field(default_factory=list)
    faults: dict[tuple[str, str | None], str] = field(default_factory=dict)
    info_bodies: dict[str, bytes] = field(default_factory=dict)  # repo_id -> the model-info body sent instead
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._servers: list[ThreadingHTTPServer] = []
        self.stopping = threading.Event()  # ends dripping and flooding answers when the server stops
        self.connections: set[socket.socket] = set()  # accepted and not yet finished
        self.url = ""
        self.cdn_url = ""

    # --- repositories ---------------------------------------------------------------------------------------------

    def add_repo(self, repo_id: str, source: Path | dict[str, bytes | Path], *, tags: tuple[str, ...] = (),
                 token: str | None = None, gated: bool = False) -> str:
        """Serve ``source`` (a directory, or file name -> content) as ``repo_id``; returns the commit sha."""
        if isinstance(source, Path):
            items = {p.name: p for p in sorted(source.iterdir()) if p.is_file()}
        else:
            items = dict(source)
        files = {name: _blob(content) for name, content in items.items()}
        listing = "".join(f"{name}\0{blob.git_sha}\n" for name, blob in sorted(files.items()))
        commit = hashlib.sha1(f"{repo_id}\n{listing}".encode()).hexdigest()
        refs = {"main": commit, **{tag: commit for tag in tags}}
        self.repos[repo_id] = Repo(repo_id, files, commit, refs, token=token, gated=gated)
        return commit

    def fault(self, repo_id: str, filename: str | None, kind: str) -> None:
        """Inject a fault: ``"500"`` (server error), ``"drop"`` (the connection breaks half-way into the file, on
        every attempt), ``"drop:N"`` (it breaks at byte N), ``"length"`` (the announced size is 100 bytes too large).
        ``filename=None`` applies to the model-info API call.

        Hostile modes: ``"drip"`` (the headers at once, then the body one byte every :data:`DRIP_INTERVAL` seconds
        until the client disconnects), ``"drip-head"`` (the status line and headers dripped too); for a file,
        ``"flood"`` (the listing and the HEAD answer say :data:`FLOOD_LISTED` bytes, the GET sends
        :data:`FLOOD_BYTES` with no ``Content-Length``, ending with the connection) and ``"flood-announced"`` (the
        same with ``Content-Length: FLOOD_BYTES``)."""
        self.faults[(repo_id, filename)] = kind

    def answer_model_info(self, repo_id: str, body: bytes) -> None:
        """Answer the model-info call of ``repo_id`` with ``body`` (status 200, JSON content type)."""
        self.info_bodies[repo_id] = body

    def model_info(self, repo_id: str, *, blobs: bool = True) -> dict:
        """The model description the server sends for ``repo_id`` at its main commit."""
        repo = self.repos[repo_id]
        siblings = []
        for name, blob in sorted(repo.files.items()):
            entry: dict = {"rfilename": name}
            if blobs:
                size = FLOOD_LISTED if self.faults.get((repo_id, name), "").startswith("flood") else blob.size
                entry.update(size=size, blobId=blob.git_sha)
                if repo.is_lfs(name):
                    entry["lfs"] = {"sha256": blob.sha256, "size": size, "pointerSize": 134}
            siblings.append(entry)
        return {
            "_id": hashlib.md5(repo_id.encode()).hexdigest()[:24], "id": repo_id, "modelId": repo_id,
            "author": repo_id.split("/")[0], "sha": repo.commit, "lastModified": "2024-09-25T14:32:11.000Z",
            "private": repo.token is not None, "gated": "manual" if repo.gated else False, "disabled": False,
            "downloads": 0, "likes": 0, "library_name": "transformers", "tags": ["transformers"],
            "siblings": siblings,
        }

    def bytes_served(self, repo_id: str) -> dict[str, int]:
        with self.lock:
            return {name: count for (repo, name), count in self.served.items() if repo == repo_id}

    def reset_counts(self) -> None:
        with self.lock:
            self.served.clear()
            self.requests.clear()

    # --- the servers ----------------------------------------------------------------------------------------------

    def start(self) -> FakeHub:
        hub_server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self, "hub"))
        cdn_server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self, "cdn"))
        for server in (hub_server, cdn_server):
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, daemon=True).start()
            self._servers.append(server)
        self.url = f"http://127.0.0.1:{hub_server.server_address[1]}"
        self.cdn_url = f"http://127.0.0.1:{cdn_server.server_address[1]}"
        return self

    def stop(self) -> None:
        """Stop serving, and end the keep-alive connections clients still hold: a later server that gets the same
        port must not find them answered by this one."""
        self.stopping.set()
        for server in self._servers:
            server.shutdown()
            server.server_close()
        self._servers.clear()
        with self.lock:
            connections = list(self.connections)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def record(self, request: Request) -> None:
        with self.lock:
            self.requests.append(request)

    def count(self, repo_id: str, name: str, n: int) -> None:
        with self.lock:
            self.served[(repo_id, name)] += n


def _handler(hub: FakeHub, role: str):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "FakeHub/1"

        def log_message(self, *args) -> None:  # keep test output clean
            pass

        def setup(self) -> None:
            super().setup()
            with hub.lock:
                hub.connections.add(self.connection)

        def finish(self) -> None:
            with hub.lock:
                hub.connections.discard(self.connection)
            super().finish()

        def do_HEAD(self) -> None:
            self._dispatch(head=True)

        def do_GET(self) -> None:
            self._dispatch(head=False)

        # --- routing ------------------------------------------------------------------------------------------

        def _dispatch(self, head: bool) -> None:
            self.status = 0
            url = urlsplit(self.path)
            try:
                if role == "cdn":
                    self._cdn(url.path, parse_qs(url.query), head)
                elif url.path == "/api/agent-harnesses":  # huggingface_hub's user-agent registry, fetched daily
                    body = json.dumps({"standardEnvVars": [], "harnesses": {}}).encode()
                    self._send(200, {"Content-Type": "application/json", "Content-Length": str(len(body))}, body)
                elif url.path.startswith("/api/models/"):
                    self._model_info(url.path[len("/api/models/"):], parse_qs(url.query))
                else:
                    match = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", url.path)
                    if match is None:
                        self._error(404, "Not found")
                    else:
                        self._resolve(unquote(match[1]), unquote(match[2]), unquote(match[3]), head)
            finally:
                if not self.status:  # no answer was begun (the handler failed): still a request the hub saw
                    self._begin(0)

        def _begin(self, status: int) -> None:
            """The answer's status, and the request recorded with it before any byte of the answer reaches the
            client: recorded after the answer, a request could land in the next test's list (the client had its
            answer, the test ended and the next one reset the list before this thread recorded it)."""
            self.status = status
            hub.record(Request(self.command, self.path, self.headers.get("Range"), status,
                               self.headers.get("Authorization") is not None, role))

        def _authorized(self, repo: Repo) -> bool:
            return repo.token is None or self.headers.get("Authorization") == f"Bearer {repo.token}"

        def _repo(self, repo_id: str) -> Repo | None:
            repo = hub.repos.get(repo_id)
            if repo is None or not self._authorized(repo):
                # the real hub answers 401 to anonymous requests and 404 to authenticated ones
                status = 404 if self.headers.get("Authorization") else 401
                self._error(status, "Repository not found", code="RepoNotFound")
                return None
            return repo

        def _commit(self, repo: Repo, revision: str) -> str | None:
            if revision in repo.refs:
                return repo.refs[revision]
            if revision == repo.commit:
                return revision
            self._error(404, f"Invalid rev id: {revision}", code="RevisionNotFound")
            return None

        def _repo_at(self, repo_id: str, revision: str) -> tuple[Repo, str] | None:
            """The repository and the commit ``revision`` names; None once the error is sent."""
            repo = self._repo(repo_id)
            commit = None if repo is None else self._commit(repo, revision)
            return None if commit is None else (repo, commit)

        # --- endpoints ----------------------------------------------------------------------------------------

        def _model_info(self, rest: str, query: dict) -> None:
            tree = re.match(r"^([^/]+/[^/]+)/tree/([^/]+)$", rest)
            if tree is not None:
                return self._tree(unquote(tree[1]), unquote(tree[2]))
            match = re.match(r"^([^/]+/[^/]+?)(?:/revision/(.+))?$", rest)
            if match is None:
                return self._error(404, "Not found")
            repo_id, revision = unquote(match[1]), unquote(match[2] or "main")
            fault = hub.faults.get((repo_id, None))
            if fault == "500":
                return self._error(500, "Internal Error")
            found = self._repo_at(repo_id, revision)
            if found is None:
                return
            repo, commit = found
            blobs = query.get("blobs", ["false"])[0].lower() == "true"
            body = hub.info_bodies.get(repo_id)
            if body is None:
                body = json.dumps({**hub.model_info(repo_id, blobs=blobs), "sha": commit}).encode()
            headers = {"Content-Type": "application/json", "Content-Length": str(len(body))}
            if fault in ("drip", "drip-head"):
                return self._drip(200, headers, body, head=fault == "drip-head")
            self._send(200, headers, body)

        def _tree(self, repo_id: str, revision: str) -> None:
            """``GET /api/models/{repo}/tree/{rev}``: the file listing ``snapshot_download`` reads (one page)."""
            found = self._repo_at(repo_id, revision)
            if found is None:
                return
            repo, _ = found
            entries = []
            for name, blob in sorted(repo.files.items()):
                entry: dict = {"type": "file", "oid": blob.git_sha, "size": blob.size, "path": name}
                if repo.is_lfs(name):
                    entry["lfs"] = {"oid": blob.sha256, "size": blob.size, "pointerSize": 134}
                entries.append(entry)
            body = json.dumps(entries).encode()
            self._send(200, {"Content-Type": "application/json", "Content-Length": str(len(body))}, body)

        def _resolve(self, repo_id: str, revision: str, name: str, head: bool) -> None:
            found = self._repo_at(repo_id, revision)
            if found is None:
                return
            repo, commit = found
            if repo.gated:
                status = 403 if self.headers.get("Authorization") else 401
                return self._error(status, f"Access to model {repo_id} is restricted. You must have access to it "
                                           "and be authenticated to access it. Please log in.", code="GatedRepo")
            blob = repo.files.get(name)
            if blob is None:
                return self._error(404, "Entry not found", code="EntryNotFound", commit=commit)
            fault = hub.faults.get((repo_id, name))
            if fault == "500":
                return self._error(500, "Internal Error")
            announced = blob.size + (100 if fault == "length" else 0)
            if fault in ("flood", "flood-announced"):
                announced = FLOOD_LISTED
            common = {"X-Repo-Commit": commit, "Accept-Ranges": "bytes"}
            if repo.is_lfs(name):
                location = f"{hub.cdn_url}/cdn/{blob.sha256}?repo={quote(repo_id, safe='')}&file={quote(name)}"
                return self._send(302, {**common, "Location": location, "ETag": f'"{blob.git_sha}"',
                                        "X-Linked-Etag": f'"{blob.sha256}"', "X-Linked-Size": str(announced),
                                        "Content-Length": "0"}, b"")
            if head:
                return self._send(200, {**common, "ETag": f'"{blob.git_sha}"', "Content-Length": str(announced)},
                                  b"", head=True)
            self._body(repo_id, name, blob, {**common, "ETag": f'"{blob.git_sha}"'}, fault)

        def _cdn(self, path: str, query: dict, head: bool) -> None:
            if self.headers.get("Authorization"):
                # a signed CDN url needs no token; huggingface_hub must not forward it off the hub
                return self._error(400, "Authorization header sent to the CDN")
            match = re.match(r"^/cdn/([0-9a-f]{64})$", path)
            repo = hub.repos.get(query.get("repo", [""])[0])
            name = query.get("file", [""])[0]
            blob = repo.files.get(name) if repo is not None else None
            if match is None or blob is None or blob.sha256 != match[1]:
                return self._error(404, "Not found")
            fault = hub.faults.get((repo.repo_id, name))
            if head:
                return self._send(200, {"Content-Length": str(blob.size), "ETag": f'"{blob.sha256}"'}, b"",
                                  head=True)
            self._body(repo.repo_id, name, blob, {"ETag": f'"{blob.sha256}"', "Accept-Ranges": "bytes"}, fault)

        # --- bodies -------------------------------------------------------------------------------------------

        def _body(self, repo_id: str, name: str, blob: Blob, headers: dict, fault: str | None) -> None:
            if fault in ("flood", "flood-announced"):
                return self._flood(repo_id, name, headers, announced=fault == "flood-announced")
            start, end = 0, blob.size  # [start, end)
            status = 200
            spec = self.headers.get("Range")
            if spec:
                match = re.match(r"^bytes=(\d*)-(\d*)$", spec.strip())
                if match is None or (not match[1] and not match[2]):
                    return self._error(416, "Bad range", extra={"Content-Range": f"bytes */{blob.size}"})
                if match[1]:
                    start = int(match[1])
                    end = min(blob.size, int(match[2]) + 1) if match[2] else blob.size
                else:
                    start, end = max(0, blob.size - int(match[2])), blob.size
                if start >= blob.size or start >= end:
                    return self._error(416, "Range not satisfiable", extra={"Content-Range": f"bytes */{blob.size}"})
                status = 206
                headers = {**headers, "Content-Range": f"bytes {start}-{end - 1}/{blob.size}"}
            length = end - start
            if fault == "drip":
                return self._drip(status, {**headers, "Content-Length": str(length),
                                           "Content-Type": "application/octet-stream"}, blob.read(start, end))
            self._begin(status)
            self.send_response(status)
            for key, value in {**headers, "Content-Length": str(length),
                               "Content-Type": "application/octet-stream"}.items():
                self.send_header(key, value)
            self.end_headers()
            stop = end
            drop = fault is not None and fault.startswith("drop")
            if drop:  # the connection breaks at the same byte of the file on every attempt
                at = int(fault.partition(":")[2] or blob.size // 2)
                stop = min(end, max(start, at))
            position = start
            while position < stop:
                chunk = blob.read(position, min(stop, position + CHUNK))
                hub.count(repo_id, name, len(chunk))  # before the client can have it (and the test read the count)
                try:
                    self.wfile.write(chunk)
                except (BrokenPipeError, ConnectionResetError):
                    hub.count(repo_id, name, -len(chunk))
                    break  # the client closed early (a range read that had enough)
                position += len(chunk)
            if drop:
                self.wfile.flush()
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                self.close_connection = True

        def _drip(self, status: int, headers: dict, body: bytes, head: bool = False) -> None:
            """Send the answer one byte every DRIP_INTERVAL seconds (the head at once unless ``head``), until the
            client disconnects or the server stops; then close the connection."""
            self._begin(status)
            lines = [f"HTTP/1.1 {status} OK", *(f"{key}: {value}" for key, value in headers.items()), "", ""]
            start = "\r\n".join(lines).encode("latin-1")
            if not head:
                self.wfile.write(start)
                start = b""
            data = start + body
            for position in range(len(data)):
                if hub.stopping.wait(DRIP_INTERVAL):
                    break
                try:
                    self.wfile.write(data[position:position + 1])
                except OSError:  # the client gave up
                    break
            self.close_connection = True

        def _flood(self, repo_id: str, name: str, headers: dict, *, announced: bool) -> None:
            """Send FLOOD_BYTES, far more than the listing said, until the client stops reading."""
            self._begin(200)
            self.send_response(200)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Type", "application/octet-stream")
            if announced:
                self.send_header("Content-Length", str(FLOOD_BYTES))
            else:
                self.send_header("Connection", "close")  # the body ends with the connection
            self.end_headers()
            chunk = b"a" * CHUNK
            sent = 0
            while sent < FLOOD_BYTES and not hub.stopping.is_set():
                hub.count(repo_id, name, len(chunk))  # before the client can have it
                try:
                    self.wfile.write(chunk)
                except OSError:  # the client stopped reading and closed the connection
                    hub.count(repo_id, name, -len(chunk))
                    break
                sent += len(chunk)
            self.close_connection = True

        def _send(self, status: int, headers: dict, body: bytes, head: bool = False) -> None:
            self._begin(status)
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            if body and not head:
                self.wfile.write(body)

        def _error(self, status: int, message: str, code: str | None = None, commit: str | None = None,
                   extra: dict | None = None) -> None:
            body = json.dumps({"error": message}).encode()
            headers = {"Content-Type": "application/json", "Content-Length": str(len(body)),
                       "X-Error-Message": message, **(extra or {})}
            if code:
                headers["X-Error-Code"] = code
            if commit:
                headers["X-Repo-Commit"] = commit
            self._send(status, headers, body if self.command != "HEAD" else b"", head=self.command == "HEAD")

    return Handler


# --- pointing huggingface_hub at the server, in this process ------------------------------------------------------


def use_hub(monkeypatch, endpoint: str, home: Path, *, offline: bool = False) -> None:
    """Point huggingface_hub at ``endpoint`` with its cache in ``home``. huggingface_hub reads HF_ENDPOINT, HF_HOME
    and HF_HUB_OFFLINE when it is imported, so its constants are set too."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1" if offline else "0")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", endpoint + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", offline)
    monkeypatch.setattr(constants, "HF_HOME", str(home))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(constants, "HF_ASSETS_CACHE", str(home / "assets"))
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(home / "token"))


# --- measuring what a command transfers -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Transfer:
    label: str
    argv: tuple[str, ...]
    exit_code: int
    stdout: str
    stderr: str
    served: dict[tuple[str, str], int]  # (repo, file) -> body bytes
    requests: int


def run_cli(hub: FakeHub, home: Path, argv: list[str], *, offline: bool = False, label: str = "",
            extra_env: dict[str, str] | None = None, timeout: float = 600) -> Transfer:
    """Run ``python -m vocabcheck ARGV`` in a fresh process configured only by the environment variables a user sets
    (HF_ENDPOINT, HF_HOME, HF_HUB_OFFLINE), and record what the hub served meanwhile."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING_FACE_"))}
    env.update({"HF_ENDPOINT": hub.url, "HF_HOME": str(home), "HF_HUB_OFFLINE": "1" if offline else "0",
                **(extra_env or {})})
    hub.reset_counts()
    done = subprocess.run([sys.executable, "-m", "vocabcheck", *argv], env=env, capture_output=True, text=True,
                          timeout=timeout)
    with hub.lock:
        served = dict(hub.served)
        requests = len(hub.requests)
    return Transfer(label, tuple(argv), done.returncode, done.stdout, done.stderr, served, requests)


def _report(target: Path, draft: Path, target_id: str, draft_id: str) -> str:
    import tempfile

    hub = FakeHub().start()
    try:
        hub.add_repo(target_id, target)
        hub.add_repo(draft_id, draft)
        with tempfile.TemporaryDirectory() as home:
            argv = ["compare", target_id, draft_id, "--json"]
            runs = [run_cli(hub, Path(home), argv, label="first run (empty cache)"),
                    run_cli(hub, Path(home), argv, label="second run (warm cache)"),
                    run_cli(hub, Path(home), argv, offline=True, label="HF_HUB_OFFLINE=1")]
    finally:
        hub.stop()
    lines = [f"target `{target_id}` = {target}", f"draft `{draft_id}` = {draft}", ""]
    first = runs[0]
    lines += ["| repository | file | file size | bytes served (first run) |", "|---|---|---:|---:|"]
    total_files = 0
    for repo_id in (target_id, draft_id):
        for name, blob in sorted(hub.repos[repo_id].files.items()):
            total_files += blob.size
            lines.append(f"| {repo_id} | {name} | {blob.size:,} | {first.served.get((repo_id, name), 0):,} |")
    lines += ["", "| run | exit | verdict | HTTP requests | bytes served | of the repositories' bytes |",
              "|---|---:|---|---:|---:|---:|"]
    for run in runs:
        try:
            verdict = json.loads(run.stdout)["verdict"]
        except ValueError:
            verdict = f"(no JSON: {run.stderr.strip()[:80]})"
        served = sum(run.served.values())
        lines.append(f"| {run.label} | {run.exit_code} | {verdict} | {run.requests} | {served:,} | "
                     f"{served / total_files:.2%} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.support.hub_server measure [TARGET_DIR DRAFT_DIR]``: serve two model directories as hub
    repositories and print, as Markdown, what ``vocabcheck compare`` transfers on a first run, a second run and
    offline. Without directories, the demo pair (``vocabcheck demo``) is used, built on first use."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tests.support.hub_server")
    sub = parser.add_subparsers(dest="command", required=True)
    measure = sub.add_parser("measure", help="measure the bytes `vocabcheck compare` transfers from a hub")
    measure.add_argument("directories", nargs="*", type=Path, help="TARGET_DIR DRAFT_DIR (default: the demo pair)")
    measure.add_argument("--target-id", default="Qwen/Qwen2.5-7B-Instruct")
    measure.add_argument("--draft-id", default="Qwen/Qwen2.5-0.5B-Instruct")
    args = parser.parse_args(argv)
    if args.directories and len(args.directories) != 2:
        parser.error("give two directories (TARGET_DIR DRAFT_DIR) or none")
    if args.directories:
        target, draft = args.directories
    else:
        from vocabcheck.demo.pair import demo_pair

        pair = demo_pair()
        target, draft = pair.target, pair.draft
    print(_report(target, draft, args.target_id, args.draft_id))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
