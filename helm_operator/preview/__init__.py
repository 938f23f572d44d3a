"""The pure half of ``helm-operator diff``: ``kubectl`` (what the user's apply sends), ``plan``
(which changes and which Helm action), ``report`` (the text and JSON written up). The reading half,
which asks the API server and Helm, is ``runtime.previewer``."""
