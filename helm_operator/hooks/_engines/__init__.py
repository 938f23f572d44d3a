"""One engine per hook kind, behind the :class:`~helm_operator.hooks.day2.Day2` facade.

- ``shared``: what every engine uses — the watches' hook modules, contexts for hooks, a fresh read
  of the resource, the ``Day2`` condition's one writer (:class:`~helm_operator.hooks.health.Health`);
- ``tasks``: supervision of the long-lived per-resource tasks (each step under the release's lock,
  woken early on a change, drained when the operator stops);
- ``stages``: value translators and ``before``/``after`` hooks around Helm actions, and the
  uninstall guard;
- ``specs``: the spec checks (each schedule's cron or interval, ``validate`` hooks) and what an
  invalid field holds;
- ``schedules``: cron and interval tasks, their state in ``status.day2.schedules``;
- ``actions``: ``helm-operator.io/action`` requests, acknowledged in ``status.day2.lastAction``;
- ``watches``: watch hooks over the release's own objects.
"""
