"""The study report: sections built from a run's ``results.json`` (``sections``), the tables they
hold (``tables``), bootstrap intervals of the association measures (``intervals``), the zip download
(``download``) and the admin pages (``views``)."""
