"""kombu's filesystem transport, made safe for a worker and several producers on one machine.

kombu creates a message file and then writes into it, and a consumer may read it in between: an empty
file, a JSONDecodeError, and the Celery worker stops for good (celery/kombu#1551). Here a message is
written under a temporary name and renamed into place (atomic on one filesystem), and a consumer claims
a message by renaming it into the processed folder of the same filesystem (only one consumer can) rather
than moving it to /tmp, which may be another filesystem where a move is a copy.
"""

from __future__ import annotations

import os
import uuid
from queue import Empty
from time import monotonic

from kombu.transport import filesystem
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads

PENDING_SUFFIX = ".part"  # never ends in ".msg": consumers do not see a message until it is complete


class Channel(filesystem.Channel):
    def _put(self, queue, payload, **kwargs):
        name = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = final + PENDING_SUFFIX
        try:
            with open(partial, "wb") as handle:
                handle.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)
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
