"""The web dashboard: static files (index.html, app.js, style.css) served by the controller at
``/``, and the GPU metrics history the node pages chart (``history.MetricsHistory``)."""
