"""REST endpoints for identity and tenancy (API.md "Identity and tenancy"). Thin: look up, check, call."""

from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import generics, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts import selectors as account_selectors
from core.api import parse_input, visible_or_404
from core.errors import InvalidInput
from quotas import selectors, services
from quotas.models import QuotaLoan


class PriorityClassListApi(generics.ListAPIView):
    class PriorityClassOutputSerializer(serializers.Serializer):
        name = serializers.CharField()
        value = serializers.IntegerField()
        preemptible = serializers.BooleanField()
        description = serializers.CharField()

    serializer_class = PriorityClassOutputSerializer

    def get_queryset(self):
        return selectors.priority_classes()


# --- Quota loans (API.md "Added 2026-12-04") ------------------------------------------


class QuotaLoanOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    from_department = serializers.CharField(source="from_department.slug", help_text="The lending department")
    to_department = serializers.CharField(source="to_department.slug", help_text="The borrowing department")
    cluster = serializers.CharField(source="pool.cluster.name")
    gpu_type = serializers.CharField(source="pool.gpu_type")
    gpus = serializers.IntegerField()
    until = serializers.DateTimeField()
    created_by = serializers.CharField(source="created_by.username", allow_null=True, default=None)
    created_at = serializers.DateTimeField()
    active = serializers.SerializerMethodField(help_text="Moving nominal quota now: not ended and not yet due.")
    ended_at = serializers.DateTimeField(allow_null=True, help_text="When it ended early or expired; null while open.")
    end_reason = serializers.CharField(help_text="ended (early), expired, or empty while open.")

    def get_active(self, loan: QuotaLoan) -> bool:
        return loan.is_active(timezone.now())


class QuotaLoanInputSerializer(serializers.Serializer):
    from_department = serializers.CharField(max_length=40, help_text="Slug of the lending department (you admin it)")
    to_department = serializers.CharField(max_length=40, help_text="Slug of the borrowing department")
    cluster = serializers.CharField(max_length=40)
    gpu_type = serializers.CharField(max_length=40)
    gpus = serializers.IntegerField(
        min_value=1,
        max_value=100_000,
        help_text="GPUs lent; at most the lender's nominal quota on the pool minus what it already lends",
    )
    until = serializers.DateTimeField(help_text="When the GPUs go back (ISO 8601); within PORTAL_QUOTA_LOAN_MAX_DAYS")


def _visible(request, loan_id: int) -> QuotaLoan:
    return visible_or_404(
        selectors.loan_get(user=request.user, loan_id=loan_id),
        "No quota loan with that id lent by or to your departments.",
    )


class QuotaLoanListApi(generics.ListAPIView):
    """Loans lent by or to the caller's departments, newest first; a lender's department admins add loans."""

    serializer_class = QuotaLoanOutputSerializer

    def get_queryset(self):
        return selectors.loans_for(user=self.request.user)

    @extend_schema(request=QuotaLoanInputSerializer, responses={201: QuotaLoanOutputSerializer})
    def post(self, request):
        values, type_errors = parse_input(QuotaLoanInputSerializer, request.data, what="the quota loan")
        slug = values.get("from_department")
        lender = account_selectors.department_for_input(user=request.user, slug=slug)
        if lender is None:
            if "from_department" not in type_errors:
                type_errors["from_department"] = [f"You are not a member of a department called {slug!r}."]
            raise InvalidInput(type_errors)
        loan = services.loan_create(
            actor=request.user,
            from_department=lender,
            to_department=values.get("to_department", ""),
            cluster=values.get("cluster", ""),
            gpu_type=values.get("gpu_type", ""),
            gpus=values.get("gpus"),
            until=values.get("until"),
            type_errors=type_errors,
        )
        return Response(QuotaLoanOutputSerializer(loan).data, status=status.HTTP_201_CREATED)


class QuotaLoanDetailApi(APIView):
    @extend_schema(responses=QuotaLoanOutputSerializer)
    def get(self, request, loan_id):
        return Response(QuotaLoanOutputSerializer(_visible(request, loan_id)).data)

    @extend_schema(
        responses={
            200: QuotaLoanOutputSerializer,
            409: OpenApiResponse(description="The loan has already ended or expired."),
        }
    )
    def delete(self, request, loan_id):
        """End a loan early (the lender's department admins): the GPUs go back at once, the borrower's jobs on
        them are taken back with the grace period. Answers the ended loan."""
        loan = services.loan_end(actor=request.user, loan=_visible(request, loan_id))
        return Response(QuotaLoanOutputSerializer(loan).data)
