"""The REST endpoints that compose the apps (see ``cockpit.api.views``)."""
