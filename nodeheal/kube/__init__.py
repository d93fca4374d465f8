"""Kubernetes side of NodeHeal: EKS authentication, client factory, Node and Pod operations."""
