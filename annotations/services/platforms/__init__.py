"""Crowd-platform services, one module per thing they own:

- ``access``: who may act on a study's workers (``access_study``), checked by every action below
  that a researcher starts (publish, approve, reject, clear a hold, bonus, block, notify, close,
  and the link services of ``annotations.services.links``): each takes the acting user and the study;
- ``publish``: put a study on its platform (MTurk HITs, a Prolific study, links), extend it;
- ``qualification``: MTurk qualification types and grants;
- ``sync``: fetch what the platform says, match it to the stored work, reconcile unconfirmed calls;
- ``review``: approve and reject submitted work;
- ``bonus``: bonuses and the researcher's review of reported problems;
- ``close``: stop recruiting (``study_close``);
- ``blocks``: block a worker (``worker_block``);
- ``notify``: message a study's MTurk workers (``workers_notify``);
- ``tokens``: the idempotency tokens, built from this installation's stored id;
- ``calls``: what to ask a platform about a call whose answer was lost.

Every call that changes state on a platform goes through ``payments.platform_call_execute``
(audit row committed as ``sent`` before the request, platform idempotency token, confirmation
after). Services here therefore do not wrap platform calls in ``transaction.atomic``; the local
writes around them are atomic on their own. The reads (cost and pay, candidates, overview) are in
``annotations.selectors.platforms``.
"""
