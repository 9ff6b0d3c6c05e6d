"""What operators ask of the server: memory per session, the session index rebuilt, sessions
purged."""

from __future__ import annotations

from functools import partial

from redis.cluster import RedisCluster

from ledger_bus.model.errors import InvalidInput
from ledger_bus.store.families import ServerAdmin
from ledger_bus.store.redis.client import ClientRequest, RedisClient, RedisPipeline
from ledger_bus.store.redis.contact import check_first_contact
from ledger_bus.store.redis.core import RedisCore, pipelined
from ledger_bus.store.redis.encoding import (
    fullest,
    glob_escape,
    text_of,
)
from ledger_bus.store.redis.sessions import newest_entry_id
from ledger_bus.store.steps import Op


class RedisAdmin(RedisCore, ServerAdmin):
    """Memory, the indexes' upkeep, the first contact."""

    def check_contact(self) -> None:
        check_first_contact(self.client)

    def memory_of(self, session_ids: list[str]) -> dict[str, dict[str, int]]:
        return self.run_op(self.memory_of_op(session_ids))

    def memory_of_op(self, session_ids: list[str]) -> Op[dict[str, dict[str, int]]]:
        """Bytes each session takes in Redis, by kind of key: `log` (the events), `streams`
        (their indexes), `append_ids`, `attempts` (open attempts and safe tools), `artifacts`
        and `other` (versions, tombstone, bounds, dead letters). MEMORY USAGE with its default
        sampling, two round trips for any number of sessions."""
        keys = self.keys

        def kinds_of(
            session_id: str, streams: set[str], groups: list[str], shas: list[str]
        ) -> dict[str, list[str]]:
            return {
                "log": [keys.log(session_id)],
                "streams": [keys.stream(session_id, name) for name in sorted(streams)],
                "append_ids": [
                    *(keys.idempotency(session_id, name) for name in sorted(streams)),
                    *(keys.trimmed(session_id, name) for name in sorted(streams)),
                ],
                "attempts": [keys.open_attempts(session_id), keys.safe_tools(session_id)],
                "artifacts": [
                    keys.artifact_uses(session_id),
                    *(keys.artifact(session_id, sha) for sha in sorted(shas)),
                ],
                "other": [
                    keys.meta(session_id),
                    keys.tombstone(session_id),
                    keys.bounds(session_id),
                    *(keys.group_dead_letters(session_id, g) for g in groups),
                ],
            }

        def look(client: RedisClient) -> object:
            pipe = client.pipeline(transaction=False)
            for session_id in session_ids:
                pipe.hkeys(keys.meta(session_id))
                pipe.hkeys(keys.tombstone(session_id))
                pipe.xinfo_groups(keys.log(session_id))
                pipe.hkeys(keys.artifact_uses(session_id))
            return pipe.execute(raise_on_error=False)

        def measure() -> Op[dict[str, dict[str, int]]]:
            found = yield look
            layout = {}
            for n, session_id in enumerate(session_ids):
                live, tomb, groups, shas = found[4 * n : 4 * n + 4]
                deleted = {text_of(f)[7:] for f in tomb if text_of(f).startswith("stream:")}
                names = (
                    [] if isinstance(groups, Exception) else [text_of(g["name"]) for g in groups]
                )
                layout[session_id] = kinds_of(
                    session_id,
                    {text_of(name) for name in live} | deleted,
                    names,
                    [text_of(sha) for sha in shas],
                )

            def usage(pipe: RedisPipeline) -> None:
                for kinds in layout.values():
                    for names in kinds.values():
                        for name in names:
                            pipe.memory_usage(name)

            sizes = iter((yield pipelined(usage)))
            return {
                session_id: {
                    kind: sum(int(next(sizes) or 0) for _ in names) for kind, names in kinds.items()
                }
                for session_id, kinds in layout.items()
            }

        return (yield from self._retried(measure))

    def _session_count(self) -> Op[int]:
        """Sessions in the index: ZCARD of its buckets, in one round trip."""

        def count(pipe: RedisPipeline) -> None:
            for key in self.keys.all_indexes():
                pipe.zcard(key)

        return sum(int(n) for n in (yield from self._run(pipelined(count))))

    def memory_info(self) -> tuple[int, int]:
        return self.run_op(self.memory_info_op())

    def memory_info_op(self) -> Op[tuple[int, int]]:
        """(used_memory, maxmemory) of the server; on a cluster, of the primary nearest its
        maxmemory (each fills on its own, and the first full one refuses its sessions'
        appends), or the one using the most where none has a maxmemory."""
        if not self.cluster:
            info = yield from self._run(lambda c: c.info("memory"))
            return int(info.get("used_memory", 0)), int(info.get("maxmemory", 0))
        nodes = yield from self._run(
            lambda c: c.info("memory", target_nodes=RedisCluster.PRIMARIES)
        )
        return fullest(nodes.values())

    def rebuild_index(self) -> int:
        """Rebuild the cross-session index from the sessions themselves; return how many."""
        pattern = self.keys.session_pattern()
        found = self.run_op(self._run(lambda c: list(c.scan_iter(match=pattern, count=1000))))

        def listed(session_id: str, ms: int) -> ClientRequest:
            index = self.keys.index_of(session_id)
            return lambda c: c.zadd(index, {session_id: ms}, gt=True)

        count = 0
        for key in found:
            name = text_of(key)
            session_id = name[name.index("{") + 1 : name.rindex("}")]
            log = self.keys.log(session_id)
            last = self.run_op(self._retried(partial(newest_entry_id, log)))
            if last != "0-0":
                self.run_op(self._run(listed(session_id, int(last.split("-")[0]))))
                self._indexed.pop(session_id, None)
                count += 1
        return count

    def purge_sessions(self, starting_with: str) -> list[str]:
        """Remove every key of the sessions whose ids start with `starting_with`, and their
        index entries; return the ids removed.

        Meant for sessions nobody writes any more, such as the demo's. A writer that appended
        to one before is refused with HistoryRewound; a new writer creates it again, from
        version 1.
        """
        if not starting_with:
            raise InvalidInput("purge_sessions needs a non-empty start of session ids")
        pattern = f"{glob_escape(self.keys.prefix)}:{{{glob_escape(starting_with)}*}}:*"
        found = self.run_op(self._run(lambda c: list(c.scan_iter(match=pattern, count=1000))))
        by_session: dict[str, list[str]] = {}
        for key in found:
            name = text_of(key)
            by_session.setdefault(name[name.index("{") + 1 : name.index("}")], []).append(name)

        def unlinked(names: list[str]) -> ClientRequest:
            return lambda c: c.unlink(*names)

        for session_id, names in by_session.items():
            self.run_op(self._run(unlinked(names)))
            self.run_op(self._forget_session(session_id))
        return sorted(by_session)
