"""Suite-wide test settings.

Sockets: pytest-socket (configured in pyproject.toml) allows loopback only, so a test that would
reach the internet or a real AWS endpoint fails instead of passing by accident.
AWS: fake credentials and a region, so neither boto3 nor moto ever looks for real ones.
"""

from __future__ import annotations

import os

os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_SESSION_TOKEN", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-west-2")
os.environ.setdefault("AWS_REGION", "us-west-2")
os.environ.pop("AWS_PROFILE", None)
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
os.environ.setdefault("JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION", "1")
os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "NodeHeal")
os.environ.setdefault("POWERTOOLS_SERVICE_NAME", "nodeheal")
