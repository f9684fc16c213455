"""The input serializers' shared rule: a request body key the endpoint does not read is a 400 that
names it, never dropped. A misspelt field (``annotator_per_unit``, ``items`` for ``item_ids``) would
otherwise fall back to its default and the write would go ahead: a study with 5 annotators per unit
instead of 10, or a generation job over a whole split. It is the body's counterpart of
``lab.api.filters.StrictDjangoFilterBackend`` (query parameters)."""
from __future__ import annotations

from collections.abc import Mapping

from drf_spectacular.extensions import OpenApiSerializerExtension
from rest_framework import serializers
from rest_framework.utils import html

# Keys a client puts in a body that no endpoint reads as data: the CSRF token of a browsable-API
# (HTML) form post.
IGNORED_BODY_KEYS = frozenset({"csrfmiddlewaretoken"})


class RejectUnknownFieldsMixin:
    """Put first in an input serializer's bases. ``to_internal_value`` answers 400 naming each key of
    the body that is not one of the serializer's writable fields, in DRF's error format (a list of
    messages under the key), beside the other fields' errors: an unknown key says which fields the
    endpoint accepts; a read-only one (declared read-only here, or a field of ``resource_serializer``,
    the representation the endpoint answers with, such as ``id``, ``owner`` or ``status``) says that
    the server sets it. Form and multipart bodies may name a list's items ``name[0]`` and a dict's
    keys ``name.key`` (DRF's HTML input): those count as ``name``."""

    resource_serializer: type[serializers.Serializer] | None = None

    def to_internal_value(self, data):
        unknown = self.unknown_field_errors(data)
        try:
            values = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if unknown and isinstance(exc.detail, Mapping):
                raise serializers.ValidationError({**exc.detail, **unknown}) from exc
            raise
        if unknown:
            raise serializers.ValidationError(unknown)
        return values

    def unknown_field_errors(self, data) -> dict[str, list[str]]:
        if not isinstance(data, Mapping):
            return {}  # DRF's own "Invalid data. Expected a dictionary" answers it
        writable = {name for name, field in self.fields.items() if not field.read_only}
        read_only = ({name for name, field in self.fields.items() if field.read_only}
                     | self._resource_field_names()) - writable
        is_form = html.is_html_input(data)
        errors = {}
        for key in data:
            if key in IGNORED_BODY_KEYS or _declared_name(key, writable, is_form=is_form):
                continue
            accepted = ", ".join(sorted(writable))
            if key in read_only:
                errors[key] = [f"{key!r} is read-only: the server sets it, a request cannot. This endpoint accepts: "
                               f"{accepted}."]
            else:
                errors[key] = [f"Unknown field {key!r}: this endpoint does not read it (misspelt?). It accepts: "
                               f"{accepted}."]
        return errors

    def _resource_field_names(self) -> set[str]:
        resource = self.resource_serializer
        if resource is None:
            return set()
        return set(resource().fields)


def _declared_name(key, writable: set[str], *, is_form: bool) -> bool:
    if key in writable:
        return True
    if not is_form or not isinstance(key, str):
        return False
    # DRF's HTML input: ``item_ids[0]`` (a list field's items), ``params.max_tokens`` (a dict's keys).
    for separator in ("[", "."):
        if separator in key and key.split(separator, 1)[0] in writable:
            return True
    return False


class RejectUnknownFieldsSchema(OpenApiSerializerExtension):
    """The OpenAPI schema says it too: such a serializer's request body has ``additionalProperties: false``."""

    target_class = RejectUnknownFieldsMixin
    match_subclasses = True

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        if direction == "request":
            schema["additionalProperties"] = False
        return schema
