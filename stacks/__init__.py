"""AWS CDK app of NodeHeal: a thin stack wiring one construct per capability."""
