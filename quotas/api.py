"""REST endpoints for identity and tenancy (API.md "Identity and tenancy"). Thin: look up, check, call."""

from rest_framework import generics, serializers

from quotas import selectors


class PriorityClassListApi(generics.ListAPIView):
    class PriorityClassOutputSerializer(serializers.Serializer):
        name = serializers.CharField()
        value = serializers.IntegerField()
        preemptible = serializers.BooleanField()
        description = serializers.CharField()

    serializer_class = PriorityClassOutputSerializer

    def get_queryset(self):
        return selectors.priority_classes()
