"""NodeHeal: event-driven auto-remediation of unhealthy GPU nodes on Amazon EKS."""

__version__ = "0.1.0"
