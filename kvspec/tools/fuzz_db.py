"""Where a campaign keeps Hypothesis's example database: a directory (one machine), or a Redis
server (``redis://host:port[/db]``) that workers on several machines share.

A Redis server is Hypothesis's own ``RedisExampleDatabase`` over the ``redis`` client: every
worker saves the inputs it found interesting under the test's key, and every worker (and
``kvspec check``, through HypoFuzz's or Hypothesis's replay of the database) replays them first.
The server is pinged here, before vLLM is imported, so that a server that is down or refuses
us costs one line and exit 2 rather than a traceback minutes into the campaign.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

from kvspec.impl.target import TargetError
from kvspec.tools.inputs import writable_directory

REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
PING_SECONDS = 3.0
KEEP_FOR = timedelta(days=365)


def is_redis(location: str) -> bool:
    return str(location).startswith(REDIS_SCHEMES)


def checked(flag: str, location: str) -> str:
    """``location`` if it can hold the database now; else one line naming it (TargetError, exit 2)."""
    if not is_redis(location):
        writable_directory(flag, Path(location))
        return str(location)
    _client(flag, location)
    return location


def _client(flag: str, url: str):
    import redis  # noqa: PLC0415 - only a Redis campaign needs the client

    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=PING_SECONDS, socket_timeout=PING_SECONDS)
        client.ping()
    except ValueError as exc:
        raise TargetError(f"{flag} {url}: not a Redis URL ({exc})") from None
    except redis.RedisError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise TargetError(f"{flag} {url}: the Redis server does not answer ({first})") from None
    return client


def database(location: str, flag: str = "--db") -> ExampleDatabase:
    """The example database at ``location`` (a directory, made if missing, or a Redis URL)."""
    if is_redis(location):
        from hypothesis.extra.redis import RedisExampleDatabase  # noqa: PLC0415

        # A campaign's inputs outlive a week-long pause (Hypothesis's default expiry is 8 days).
        return RedisExampleDatabase(_client(flag, location), expire_after=KEEP_FOR, key_prefix=b"kvspec-fuzz:")
    Path(location).mkdir(parents=True, exist_ok=True)
    return DirectoryBasedExampleDatabase(str(location))
