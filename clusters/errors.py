"""The error every cluster-facing adapter raises (executors, the Kubernetes client, TensorBoard and model-server
backends): a message a person can act on and whether trying again can help (``permanent``). No Django here."""

from __future__ import annotations


class ExecutorError(Exception):
    """A failure talking to the place that runs jobs.

    ``permanent`` says whether trying again can help: a transient error is
    retried with backoff, a permanent one fails the job with this message.
    """

    def __init__(self, message: str, *, permanent: bool):
        super().__init__(message)
        self.message = message
        self.permanent = permanent
