"""What quotas tell the floors above them: admission (jobs.admission) listens and runs a scheduling cycle.

A signal rather than a call because admission sits above quotas in the stack (docs/architecture.md): a quota
or priority change may admit waiting jobs at once, but quotas must not import the code that moves Job rows.
"""

from django.dispatch import Signal

# Sent after a department's quotas or a priority class changed (inside the request, before it returns).
capacity_changed = Signal()
