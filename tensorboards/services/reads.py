"""Who may see which board: the reads of TensorBoard rows.

Owns the rule that a user may open a board only if every job of it is visible to them (a comparison board
the user may not see is answered as 404, like one that does not exist), and the listing of such boards.
"""

from __future__ import annotations

from jobs import selectors
from jobs.models import Job
from tensorboards.models import TensorBoard


def board_job_ids(board: TensorBoard) -> list[int]:
    return sorted(board.jobs.values_list("pk", flat=True))


def board_of_job(*, job: Job) -> TensorBoard | None:
    return TensorBoard.objects.filter(key=f"job:{job.pk}").first()


def board_get(*, user, board_id: int) -> TensorBoard | None:
    """A comparison board if the user may see every job of it; None otherwise (answered as 404 alike)."""
    board = TensorBoard.objects.filter(pk=board_id, key__startswith="compare:").first()
    if board is None:
        return None
    ids = board_job_ids(board)
    visible = selectors.jobs_for(user=user).filter(pk__in=ids).count()
    return board if ids and visible == len(ids) else None


def boards_for(*, user) -> list[TensorBoard]:
    """Boards all of whose jobs the user may see, newest first."""
    visible = selectors.jobs_for(user=user).values("pk")
    hidden = TensorBoard.jobs.through.objects.exclude(job_id__in=visible).values("tensorboard_id")
    return list(
        TensorBoard.objects.filter(jobs__in=visible).exclude(pk__in=hidden).distinct().order_by("-started_at", "-pk")
    )
