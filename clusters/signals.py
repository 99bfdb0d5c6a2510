"""What clusters ask the floors above them.

``storage_deleting``: sent inside the transaction that would delete a storage volume; each receiver returns the ids
of unfinished jobs that mount it (jobs.usage.storage_users answers), and any id refuses the delete. A signal
because jobs sit above clusters in the stack (docs/architecture.md).
"""

from django.dispatch import Signal

storage_deleting = Signal()
