"""Status fields change only through their model's declared machine (``lab.transitions``).

Every model with a status field declares ``STATUS = StatusMachine(...)``. These tests try every
forbidden change of every machine, and read the source of the apps to check that nothing writes a
status field another way (``obj.status = ...``, ``.update(status=...)``, ``save(update_fields=[...
"status" ...])``)."""
from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest
from django.apps import apps

from lab.transitions import StatusMachine, TransitionError

ROOT = Path(__file__).resolve().parent.parent
APPS = ("studies", "annotations", "scoring")

# Modules not yet moved to the machines. Each entry is a debt: it must shrink to nothing.
NOT_YET_CONVERTED: set[str] = set()


def machines() -> list[tuple[type, StatusMachine]]:
    found = []
    for model in apps.get_models():
        machine = getattr(model, "STATUS", None)
        if isinstance(machine, StatusMachine):
            found.append((model, machine))
    return found


def _status_like(field) -> bool:
    """A field that holds a state chosen from a list: ``status``, ``validation_status``, ... (a
    platform's own status text, which has no choices, is a record of what it said, not a state)."""
    return field.name.endswith("status") and bool(field.choices)


def test_every_status_field_has_a_machine():
    with_status = {
        (model, field.name) for model in apps.get_models() if model._meta.app_label in APPS
        for field in model._meta.concrete_fields if _status_like(field)
    }
    assert with_status == {(model, machine.field) for model, machine in machines()}


def test_validation_status_is_guarded():
    from studies.models import GeneralizationQuestion

    assert GeneralizationQuestion.STATUS.field == "validation_status"
    assert "validation_status" in STATUS_FIELDS


@pytest.mark.parametrize("model,machine", machines(), ids=lambda v: getattr(v, "__name__", ""))
def test_machine_names_only_real_states(model, machine):
    choices = {value for value, _ in model._meta.get_field(machine.field).choices}
    assert machine.states <= choices


def _forbidden():
    for model, machine in machines():
        choices = [value for value, _ in model._meta.get_field(machine.field).choices]
        for old, new in itertools.permutations(choices, 2):
            if not machine.can(old, new):
                yield pytest.param(model, machine, old, new, id=f"{model.__name__}:{old}->{new}")


@pytest.mark.parametrize("model,machine,old,new", list(_forbidden()))
def test_forbidden_transition_is_refused(model, machine, old, new):
    obj = model(**{machine.field: old})
    with pytest.raises(TransitionError, match=f"cannot go from '{old}' to '{new}'"):
        machine.move(obj, new, save=False)
    assert getattr(obj, machine.field) == old


def test_staying_in_a_state_is_not_a_move():
    model, machine = machines()[0]
    state = next(iter(machine.states))
    obj = model(**{machine.field: state})
    assert machine.move(obj, state, save=False) is False


STATUS_FIELDS = frozenset({"status"} | {machine.field for _model, machine in machines()})


def _status_writes(path: Path) -> list[str]:
    return _status_writes_in(path, name=str(path.relative_to(ROOT)))


def _status_writes_in(path: Path, *, name: str) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Attribute) and target.attr in STATUS_FIELDS:
                    found.append(f"{name}:{node.lineno} assigns .{target.attr}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "update":
                for k in node.keywords:
                    if k.arg in STATUS_FIELDS:
                        found.append(f"{name}:{node.lineno} .update({k.arg}=...)")
            if node.func.attr in ("save", "bulk_update"):
                listed = [ast.unparse(k.value) for k in node.keywords if k.arg in ("update_fields", "fields")]
                listed += [ast.unparse(a) for a in node.args[1:2]] if node.func.attr == "bulk_update" else []
                for text in listed:
                    for name in STATUS_FIELDS:
                        if f"'{name}'" in text.replace('"', "'"):
                            found.append(f"{name}:{node.lineno} {node.func.attr}([{name}])")
    return found


def test_the_guard_sees_a_validation_status_write(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("q.validation_status = 'valid'\nQ.objects.update(validation_status='valid')\n"
                      "Q.objects.bulk_update(rows, ['validation_status'])\n")
    found = _status_writes_in(module, name="m.py")
    assert len(found) == 3, found


def test_no_module_writes_a_status_outside_its_machine():
    offenders = []
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            if "/migrations/" in rel or rel in NOT_YET_CONVERTED:
                continue
            offenders += _status_writes(path)
    assert offenders == [], "write these through Model.STATUS.move / move_queryset:\n" + "\n".join(offenders)


def test_the_debt_list_names_real_offenders_only():
    for rel in NOT_YET_CONVERTED:
        assert _status_writes(ROOT / rel), f"{rel} writes no status any more: remove it from NOT_YET_CONVERTED"
