"""kombu's filesystem transport, made safe for a worker and several producers on one machine.

kombu creates a message file and then writes into it, and a consumer may read it in between: an empty
file, a JSONDecodeError, and the Celery worker stops for good (celery/kombu#1551). The exchange tables
(which queue a routing key goes to) have the same race: a binder creates the file empty, then locks it.
Here every file is written under a temporary name and renamed into place (atomic on one filesystem);
exchange tables are changed under a lock on a separate lock file; and a consumer claims a message by
renaming it into the processed folder of the same filesystem (only one consumer can) rather than moving
it to /tmp, which may be another filesystem where a move is a copy.
"""

from __future__ import annotations

import os
import uuid
from queue import Empty
from time import monotonic

from kombu.transport import filesystem
from kombu.transport.filesystem import LOCK_EX, exchange_queue_t, lock, unlock
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads

PENDING_SUFFIX = ".part"  # never ends in ".msg": consumers do not see a message until it is complete


def _write_atomically(path: str, data: bytes) -> None:
    partial = f"{path}.{uuid.uuid4().hex}{PENDING_SUFFIX}"
    with open(partial, "wb") as handle:
        handle.write(data)
    os.replace(partial, path)


class Channel(filesystem.Channel):
    def _change_table(self, exchange, change) -> None:
        """Read, change and rewrite an exchange's table under an exclusive lock; readers see whole files."""
        file = self._exchange_file(exchange)
        self.control_folder.mkdir(exist_ok=True)
        try:
            with open(f"{file}.lock", "ab") as guard:
                lock(guard, LOCK_EX)
                try:
                    try:
                        table = [exchange_queue_t(*q) for q in loads(bytes_to_str(file.read_bytes()))]
                    except FileNotFoundError:
                        table = []
                    changed = change(table)
                    if changed is not None:
                        _write_atomically(str(file), str_to_bytes(dumps(changed)))
                finally:
                    unlock(guard)
        except OSError as exc:
            raise filesystem.ChannelError(f"Cannot open {file}") from exc

    def _queue_bind(self, exchange, routing_key, pattern, queue):
        entry = exchange_queue_t(routing_key or "", pattern or "", queue or "")
        self._change_table(exchange, lambda table: None if entry in table else [entry, *table])

    def _delete(self, queue, exchange, routing_key, pattern, *args, **kwargs):
        filesystem.virtual.Channel._delete(self, queue, exchange, routing_key, pattern, *args, **kwargs)
        entry = exchange_queue_t(routing_key or "", pattern or "", queue or "")
        self._change_table(exchange, lambda table: [q for q in table if q != entry] if entry in table else None)

    def _put(self, queue, payload, **kwargs):
        name = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        try:
            _write_atomically(final, str_to_bytes(dumps(payload)))
        except OSError as exc:
            raise filesystem.ChannelError(f"Cannot add file {final!r} to directory") from exc

    def _get(self, queue):
        wanted = f"{queue}.msg"
        for name in sorted(os.listdir(self.data_folder_in)):
            if name.partition(".")[2] != wanted:
                continue
            claimed = os.path.join(self.processed_folder, name)
            try:
                os.rename(os.path.join(self.data_folder_in, name), claimed)
            except OSError:
                continue  # another consumer took it first
            try:
                with open(claimed, "rb") as handle:
                    payload = handle.read()
                if not self.store_processed:
                    os.remove(claimed)
            except OSError as exc:
                raise filesystem.ChannelError(f"Cannot read file {claimed!r} from queue.") from exc
            return loads(bytes_to_str(payload))
        raise Empty()


class Transport(filesystem.Transport):
    Channel = Channel
