"""REST endpoints for TensorBoards (API.md "TensorBoard"). Thin: look up, check, call tensorboards.services."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import visible_or_404
from jobs import selectors as job_selectors
from jobs.models import Job
from tensorboards import services as boards


def _visible_job(request, job_id) -> Job:
    return visible_or_404(
        job_selectors.job_get(user=request.user, job_id=job_id), "No job with that id in your departments."
    )


class TensorBoardOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField(allow_null=True, help_text="Null until a board was started for the job")
    url = serializers.CharField(help_text="Where the board is served, through the portal's proxy")
    status = serializers.ChoiceField(choices=["starting", "running", "stopped", "failed"])
    message = serializers.CharField()
    jobs = serializers.ListField(child=serializers.IntegerField())
    started_at = serializers.DateTimeField(allow_null=True)
    last_access_at = serializers.DateTimeField(allow_null=True)


def _board_data(board, job=None) -> dict:
    if board is None:
        return {
            "id": None,
            "url": f"/tensorboard/{job.pk}/",
            "status": "stopped",
            "message": "",
            "jobs": [job.pk],
            "started_at": None,
            "last_access_at": None,
        }
    return {
        "id": board.pk,
        "url": boards.board_url(board),
        "status": board.status,
        "message": board.message,
        "jobs": boards.board_job_ids(board),
        "started_at": board.started_at,
        "last_access_at": board.last_access_at,
    }


class JobTensorBoardApi(APIView):
    """The job's TensorBoard: GET its status, POST to start it (idempotent)."""

    @extend_schema(responses=TensorBoardOutputSerializer)
    def get(self, request, job_id):
        job = _visible_job(request, job_id)
        board = boards.board_of_job(job=job)
        if board is not None:
            board = boards.board_observe(board=board)
        return Response(TensorBoardOutputSerializer(_board_data(board, job)).data)

    @extend_schema(request=None, responses=TensorBoardOutputSerializer)
    def post(self, request, job_id):
        board = boards.board_start_for_job(user=request.user, job=_visible_job(request, job_id))
        return Response(TensorBoardOutputSerializer(_board_data(board)).data)


class TensorBoardCompareInputSerializer(serializers.Serializer):
    jobs = serializers.ListField(child=serializers.IntegerField(), allow_empty=False, max_length=100)


class TensorBoardListApi(APIView):
    """Boards of the caller's departments (GET); POST starts one board comparing several jobs' runs."""

    @extend_schema(responses=TensorBoardOutputSerializer(many=True))
    def get(self, request):
        return Response(
            TensorBoardOutputSerializer([_board_data(b) for b in boards.boards_for(user=request.user)], many=True).data
        )

    @extend_schema(request=TensorBoardCompareInputSerializer, responses=TensorBoardOutputSerializer)
    def post(self, request):
        data = TensorBoardCompareInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        board = boards.board_start_compare(user=request.user, job_ids=data.validated_data["jobs"])
        return Response(TensorBoardOutputSerializer(_board_data(board)).data)


class TensorBoardDetailApi(APIView):
    @extend_schema(responses=TensorBoardOutputSerializer)
    def get(self, request, board_id):
        board = visible_or_404(
            boards.board_get(user=request.user, board_id=board_id), "No TensorBoard with that id in your departments."
        )
        return Response(TensorBoardOutputSerializer(_board_data(boards.board_observe(board=board))).data)
