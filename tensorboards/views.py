"""The portal's page of a comparison board: /tensorboards/<id>/ (the jobs list's "Compare in TensorBoard").

The board itself is TensorBoard behind the proxy (/tensorboard/compare/<id>/); this page puts it in a frame under
the portal's navigation, with the jobs it compares and a way back to them. Thin: look up, render.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.utils.translation import gettext as _

from core.api import visible_or_404
from jobs import selectors as job_selectors
from tensorboards import services as boards


@login_required
def board_page(request, board_id: int):
    board = visible_or_404(
        boards.board_get(user=request.user, board_id=board_id), _("No TensorBoard with that id in your departments.")
    )
    jobs = (
        job_selectors.jobs_for(user=request.user)
        .filter(pk__in=boards.board_job_ids(board))
        .select_related("department")
        .order_by("pk")
    )
    return render(request, "tensorboards/board.html", {"board": board, "jobs": jobs, "url": boards.board_url(board)})
