from django.apps import AppConfig


class AnnotationsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "annotations"
    verbose_name = "Annotations: workers, assignments and answers"

    def ready(self):
        # Register the app's Celery tasks in every process (web included): services send some of
        # them by name (``annotations.services.stopping.CLOSE_TASK``) and must find them registered,
        # so that eager mode and routing apply as for a task imported directly.
        from annotations import tasks  # noqa: F401 (the package registers both task modules)

        # A generalization question marked invalid (or valid again) closes (reopens) its units in
        # open studies: studies announces the change, as it may not import this app.
        from annotations.services.stopping import question_validation_changed
        from studies.signals import generalization_validation_changed

        generalization_validation_changed.connect(question_validation_changed,
                                                  dispatch_uid="annotations.question_validation_changed")

        # A study handed to another owner comes under that owner's blocks (a researcher's block
        # covers the studies they own): the tasks in progress of the workers they blocked end there.
        from annotations.services.platforms.blocks import study_handed_over
        from studies.signals import study_owner_changed

        study_owner_changed.connect(study_handed_over, dispatch_uid="annotations.study_handed_over")

        # A rejection answering "applied" after sync marked it failed puts back the hold that marking
        # it failed gave back (``payments.call_confirmed_late``).
        from annotations.services.payments import call_confirmed_late
        from annotations.services.platforms.review import reject_confirmed_late

        call_confirmed_late.connect(reject_confirmed_late, dispatch_uid="annotations.reject_confirmed_late")
