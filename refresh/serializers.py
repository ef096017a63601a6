"""The refresh endpoint's request and result, for validation and the OpenAPI schema."""

from __future__ import annotations

from typing import Any, get_args

from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.validators import ProhibitSurrogateCharactersValidator

from edge.config.yaml_source import MAX_CONFIG_BYTES
from refresh.classify import Apply, Op
from refresh.models import MAX_REASON_CHARS
from refresh.plan import STATUSES, Mode, PushStatus


class FastSurrogateCheck(ProhibitSurrogateCharactersValidator):
    """DRF's check and answer, made in C: DRF's own looks at each character in Python, half a
    second of a 2 MB config with the interpreter held."""

    def __call__(self, value: object) -> None:
        text = str(value)
        try:
            text.encode()
        except UnicodeEncodeError as exc:
            message = self.message.format(code_point=ord(text[exc.start]))
            raise ValidationError(message, code=self.code) from None


class ConfigTextField(serializers.CharField):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # DRF's stubs leave the list's type open (a property with a setter).
        validators: list[Any] = self.validators  # type: ignore[has-type]
        self.validators = [
            FastSurrogateCheck() if isinstance(v, ProhibitSurrogateCharactersValidator) else v
            for v in validators
        ]


class StrictTextField(serializers.CharField):
    """Text that must arrive as a JSON string: DRF's CharField would take 5 or true as "5"."""

    default_error_messages = {"invalid": "Must be a string."}

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class RefreshRequestSerializer(serializers.Serializer):
    mode = serializers.ChoiceField(choices=get_args(Mode))
    config_yaml = ConfigTextField(
        required=False,
        trim_whitespace=False,
        max_length=MAX_CONFIG_BYTES,
        help_text="Candidate config; without it the Edge re-reads its config file.",
    )
    base_revision = serializers.RegexField(
        r"^sha256:[0-9a-f]{64}$",
        required=False,
        help_text="The revision the plan was made against; a different running one is `stale`.",
    )
    candidate_revision = serializers.RegexField(
        r"^sha256:[0-9a-f]{64}$",
        required=False,
        help_text="The candidate revision that was reviewed; a different candidate is `stale`.",
    )
    reason = StrictTextField(
        required=False,
        allow_blank=True,
        max_length=MAX_REASON_CHARS,
        help_text="Why: stored on the refresh record and shown with it.",
    )


class ChangeSerializer(serializers.Serializer):
    path = serializers.CharField()
    op = serializers.ChoiceField(choices=get_args(Op))
    old = serializers.JSONField(allow_null=True)
    new = serializers.JSONField(allow_null=True)
    apply = serializers.ChoiceField(choices=get_args(Apply))


class ErrorSerializer(serializers.Serializer):
    path = serializers.CharField()
    message = serializers.CharField()


class NodePushSerializer(serializers.Serializer):
    node = serializers.CharField()
    status = serializers.ChoiceField(choices=get_args(PushStatus))
    error = serializers.CharField(allow_null=True)


class RefreshResultSerializer(serializers.Serializer):
    refresh_id = serializers.CharField()
    mode = serializers.ChoiceField(choices=get_args(Mode))
    status = serializers.ChoiceField(choices=STATUSES)
    base_revision = serializers.CharField()
    candidate_revision = serializers.CharField(allow_null=True)
    changes = ChangeSerializer(many=True)
    changed_nodes = serializers.ListField(child=serializers.CharField())
    changed_providers = serializers.ListField(child=serializers.CharField())
    changed_models = serializers.ListField(child=serializers.CharField())
    restart_required_paths = serializers.ListField(child=serializers.CharField())
    errors = ErrorSerializer(many=True)
    node_pushes = NodePushSerializer(many=True)
