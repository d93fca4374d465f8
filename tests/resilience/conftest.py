"""The resilience tests reuse the workflow tests' harness: synthesized stack in moto, fake cluster."""

from tests.workflow.conftest import pipeline

__all__ = ["pipeline"]
