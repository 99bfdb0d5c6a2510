"""REST endpoints for identity and tenancy (API.md "Identity and tenancy"): obtaining a token, who am I, the
departments I belong to, the audit log, and personal API tokens. Thin: look up, check, call."""

from django.contrib.auth import authenticate
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers, status
from rest_framework.exceptions import PermissionDenied
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts import login, permissions, tokens
from accounts import selectors as account_selectors
from accounts.models import ApiToken
from core.api import visible_or_404


class TokenApi(APIView):
    """Sign in with a username and password and get a new personal API token (named "api").

    Keys are stored hashed, so an existing key cannot be returned again: every call issues a new key, and
    the keys of earlier calls keep working until revoked (`GET /api/v1/tokens/`, `DELETE /api/v1/tokens/<id>/`,
    or the API tokens page in the browser).
    """

    permission_classes = [AllowAny]
    authentication_classes: list = []

    class TokenInputSerializer(serializers.Serializer):
        username = serializers.CharField()
        password = serializers.CharField(style={"input_type": "password"}, trim_whitespace=False)
        expires_in_days = serializers.IntegerField(
            required=False,
            allow_null=True,
            help_text="Days the new token works; omitted: the longest lifetime allowed (PORTAL_TOKEN_MAX_DAYS).",
        )

    class TokenOutputSerializer(serializers.Serializer):
        token = serializers.CharField()

    @extend_schema(request=TokenInputSerializer, responses={200: TokenOutputSerializer}, auth=[])
    def post(self, request):
        data = self.TokenInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        expires_in_days = data.validated_data.pop("expires_in_days", None)
        # The Django request, not DRF's wrapper: django-axes marks a locked-out try on it (accounts/login.py).
        user = authenticate(request._request, **data.validated_data)
        if user is None:
            if getattr(request._request, "axes_locked_out", False):
                return login.lockout_response(request._request)  # 429, saying until when
            # One message for any wrong part, so callers cannot probe usernames.
            raise serializers.ValidationError(
                {"non_field_errors": ["Unable to sign in with that username and password."]}
            )
        _, key = tokens.token_create(user=user, name="api", expires_in_days=expires_in_days)
        return Response({"token": key})


class MembershipOutput(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()
    role = serializers.CharField()


class MeApi(APIView):
    class MeOutputSerializer(serializers.Serializer):
        username = serializers.CharField()
        is_platform_admin = serializers.BooleanField()
        departments = MembershipOutput(many=True)

    @extend_schema(responses=MeOutputSerializer)
    def get(self, request):
        user = request.user
        departments = [
            {"slug": m.department.slug, "name": m.department.name, "role": m.role}
            for m in user.memberships.select_related("department")
        ]
        return Response(
            self.MeOutputSerializer(
                {
                    "username": user.username,
                    "is_platform_admin": permissions.is_platform_admin(user),
                    "departments": departments,
                }
            ).data
        )


class DepartmentListApi(generics.ListAPIView):
    class DepartmentSummaryOutputSerializer(serializers.Serializer):
        slug = serializers.CharField()
        name = serializers.CharField()
        role = serializers.SerializerMethodField()

        def get_role(self, department) -> str | None:
            return permissions.roles(self.context["request"].user).get(department.pk)

    serializer_class = DepartmentSummaryOutputSerializer

    def get_queryset(self):
        return permissions.visible_departments(self.request.user)


class AuditListApi(generics.ListAPIView):
    class AuditEventOutputSerializer(serializers.Serializer):
        at = serializers.DateTimeField()
        actor = serializers.CharField(source="actor.username", allow_null=True, default=None)
        department = serializers.CharField(source="department.slug", allow_null=True, default=None)
        action = serializers.CharField()
        target = serializers.CharField()
        data = serializers.JSONField()

    serializer_class = AuditEventOutputSerializer

    def get(self, request, *args, **kwargs):
        user = request.user
        if not (permissions.is_platform_admin(user) or "dept_admin" in permissions.roles(user).values()):
            raise PermissionDenied("The audit log is for department and platform admins.")
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        return account_selectors.audit_events_for(user=self.request.user)


class ApiTokenOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    prefix = serializers.CharField(help_text="The first characters of the key, to tell tokens apart.")
    created_at = serializers.DateTimeField()
    last_used_at = serializers.DateTimeField(allow_null=True, help_text="Updated at most once a minute.")
    expires_at = serializers.DateTimeField(allow_null=True)


class ApiTokenListApi(generics.ListAPIView):
    """The caller's working personal API tokens (never their keys), and creating one."""

    class ApiTokenInputSerializer(serializers.Serializer):
        name = serializers.CharField(
            max_length=tokens.NAME_MAX_LENGTH, help_text="What the token is for, e.g. the script using it."
        )
        expires_in_days = serializers.IntegerField(
            required=False,
            allow_null=True,
            help_text="Days the token works. Omit both this and expires_at for the longest lifetime allowed "
            "(PORTAL_TOKEN_MAX_DAYS; without it, never expires).",
        )
        expires_at = serializers.DateTimeField(
            required=False, allow_null=True, help_text="When the token stops working (instead of expires_in_days)."
        )

    class ApiTokenCreatedSerializer(ApiTokenOutputSerializer):
        key = serializers.CharField(help_text="The key, shown only in this response: store it now.")

    serializer_class = ApiTokenOutputSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation runs without a user
            return ApiToken.objects.none()
        return tokens.active_tokens(user=self.request.user)

    @extend_schema(request=ApiTokenInputSerializer, responses={201: ApiTokenCreatedSerializer})
    def post(self, request):
        data = self.ApiTokenInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        token, key = tokens.token_create(
            user=request.user,
            name=data.validated_data["name"],
            expires_in_days=data.validated_data.get("expires_in_days"),
            expires_at=data.validated_data.get("expires_at"),
        )
        body = {**ApiTokenOutputSerializer(token).data, "key": key}
        return Response(self.ApiTokenCreatedSerializer(body).data, status=status.HTTP_201_CREATED)


class ApiTokenDetailApi(APIView):
    @extend_schema(request=None, responses={204: None})
    def delete(self, request, token_id):
        """Revoke one of the caller's tokens; requests with its key get 401 from now on."""
        visible_or_404(tokens.token_revoke(user=request.user, token_id=token_id), "No such token among yours.")
        return Response(status=status.HTTP_204_NO_CONTENT)
