"""Tenants, users, API keys and the REST service on the command line.

    memstrata tenant create T [--name N] | list
    memstrata user create U [--tenant T] [--name N] | show U | list | erase U [--dry-run]
    memstrata apikey create --tenant T [--name N] [--scope read,write,admin] | list | revoke ID
    memstrata api [--host H] [--port P] [--workers N]

User ids are external ids (emails, ``user:42``, ``张三``), mapped to key parts as everywhere
(``core.ids.user_key``).  ``apikey create`` prints the secret once; only its hash is kept.
"""

from __future__ import annotations

import argparse
import json
import os

from memstrata.ops.runtime import CliError, connected_runtime


def _tenant(args: argparse.Namespace) -> int:
    rt = connected_runtime()
    if args.action == "create":
        t = rt.owners.create_tenant(args.tenant_id, name=args.name)
        print(f"tenant {t.tenant_id} created ({t.name})")
        return 0
    rows = rt.owners.list_tenants()
    if args.json:
        print(json.dumps([t.model_dump(mode="json") for t in rows]))
        return 0
    print(f"{len(rows)} tenant(s)")
    for t in rows:
        print(f"  {t.tenant_id:24s} users {t.users:<6d} {t.name}")
    return 0


def _memory(args: argparse.Namespace) -> object:
    from memstrata.client import Memory

    return Memory(runtime=connected_runtime(), tenant=args.tenant)


def _user(args: argparse.Namespace) -> int:
    from memstrata.client import Memory

    m = _memory(args)
    assert isinstance(m, Memory)
    if args.action in {"create", "show", "erase"} and not args.user_id:
        raise CliError(f"user {args.action}: name the user, e.g. memstrata user {args.action} U")
    if args.action == "create":
        u = m.admin.create_user(args.user_id, display_name=args.name)
        print(f"user {u.user_id} created in tenant {u.tenant_id} (key part {u.key})")
    elif args.action == "show":
        u = m.admin.get_user(args.user_id)
        if args.json:
            print(u.model_dump_json())
            return 0
        items = m.inspect(user_id=args.user_id, limit=1000)
        print(f"user {u.user_id} of tenant {u.tenant_id}: key part {u.key}, "
              f"display name {u.display_name or '-'}, created {u.created_at:%Y-%m-%d %H:%M}, "
              f"{len(items)} STM item(s)")  # fmt: skip
    elif args.action == "list":
        rows = m.admin.list_users()
        if args.json:
            print(json.dumps([u.model_dump(mode="json") for u in rows]))
            return 0
        print(f"{len(rows)} user(s) in tenant {m.tenant}")
        for u in rows:
            print(f"  {u.user_id}" + (f"  (key part {u.key})" if u.key != u.user_id else ""))
    else:
        r = m.erase(args.user_id, dry_run=args.dry_run)
        counts = r.found if r.dry_run else r.removed
        verb = "would remove" if r.dry_run else "removed"
        shown = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if v) or "nothing"
        print(f"{'dry run: ' if r.dry_run else ''}user {r.user_id} of tenant {r.tenant_id}: "
              f"{verb} {shown}")  # fmt: skip
    m.close()
    return 0


def _apikey(args: argparse.Namespace) -> int:
    rt = connected_runtime()
    if args.action == "create":
        if not args.tenant:
            raise CliError("apikey create: --tenant is required (the key's tenant)")
        scopes = [s.strip() for s in args.scope.split(",") if s.strip()]
        new = rt.api_keys.create(args.tenant, name=args.name, scopes=scopes)
        print(f"API key {new.info.key_id} for tenant {new.info.tenant_id}, scopes "
              f"{','.join(new.info.scopes)}; the secret is shown once, store it now:")  # fmt: skip
        print(new.secret)
    elif args.action == "list":
        rows = rt.api_keys.list(args.tenant)
        if args.json:
            print(json.dumps([k.model_dump(mode="json") for k in rows]))
            return 0
        print(f"{len(rows)} API key(s)")
        for k in rows:
            state = "revoked" if k.revoked_at else "active"
            print(f"  {k.key_id}  {k.tenant_id:20s} {','.join(k.scopes):17s} {state:8s} {k.name}")
    else:
        if not args.key_id:
            raise CliError("apikey revoke: name the key id (memstrata apikey list)")
        k = rt.api_keys.revoke(args.key_id)
        print(f"API key {k.key_id} of tenant {k.tenant_id} revoked")
    return 0


def _api(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from memstrata.ops.api.transport import HTTP_PROTOCOL
    except ImportError as exc:
        raise CliError(
            "the REST service needs the server extra: pip install 'memstrata[server]'"
        ) from exc
    rt = connected_runtime()
    s = rt.settings
    host, port = args.host or s.api_host, args.port or s.api_port
    workers = args.workers or s.api_workers
    print(f"memstrata api on http://{host}:{port}/ (OpenAPI at /openapi.json, {workers} worker(s))",
          flush=True)  # fmt: skip
    os.environ.setdefault("MEMSTRATA_TRANSCRIPT_DIR", str(s.transcript_dir.resolve()))
    uvicorn.run(
        "memstrata.ops.api.app:served_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        http=HTTP_PROTOCOL,  # TCP_NODELAY: ~44 ms per keep-alive request without it
        log_level=args.log_level,
        access_log=args.access_log,
        server_header=False,
    )
    return 0


def add_admin(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    t = sub.add_parser("tenant", help="create or list tenants")
    t.add_argument("action", choices=["create", "list"])
    t.add_argument("tenant_id", nargs="?")
    t.add_argument("--name", help="display name (default: the id)")
    t.add_argument("--json", action="store_true")
    t.set_defaults(func=_tenant_checked)

    u = sub.add_parser("user", help="create, show, list or erase a tenant's users")
    u.add_argument("action", choices=["create", "show", "list", "erase"])
    u.add_argument("user_id", nargs="?", help="any id: alice@example.com, user:42, 张三")
    u.add_argument("--tenant", help="the user's tenant (default MEMSTRATA_TENANT)")
    u.add_argument("--name", help="display name (create)")
    u.add_argument("--dry-run", action="store_true", help="erase: only count what would go")
    u.add_argument("--json", action="store_true")
    u.set_defaults(func=_user)

    k = sub.add_parser("apikey", help="create, list or revoke REST API keys")
    k.add_argument("action", choices=["create", "list", "revoke"])
    k.add_argument("key_id", nargs="?", help="revoke: the key id")
    k.add_argument("--tenant", help="the key's tenant (create; filter for list)")
    k.add_argument("--name", default="default", help="a label for the key")
    k.add_argument("--scope", default="read,write", help="read,write,admin (comma-separated)")
    k.add_argument("--json", action="store_true")
    k.set_defaults(func=_apikey)

    a = sub.add_parser("api", help="run the REST service (FastAPI + uvicorn)")
    a.add_argument("--host", help="default MEMSTRATA_API_HOST (127.0.0.1)")
    a.add_argument("--port", type=int, help="default MEMSTRATA_API_PORT (8300)")
    a.add_argument("--workers", type=int, help="processes (default MEMSTRATA_API_WORKERS)")
    a.add_argument("--log-level", default="info")
    a.add_argument("--no-access-log", dest="access_log", action="store_false")
    a.set_defaults(func=_api)


def _tenant_checked(args: argparse.Namespace) -> int:
    if args.action == "create" and not args.tenant_id:
        raise CliError("tenant create: name the tenant, e.g. memstrata tenant create acme")
    return _tenant(args)
