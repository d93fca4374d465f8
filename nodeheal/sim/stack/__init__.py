"""NodeHeal's synthesized stack as the simulation reads it.

- `synthesized_app`: the parts of the CloudFormation template the local harness reads (functions,
  their roles and access entries, the state machine) and a resolver for the intrinsics CDK emits;
- `template_cache`: synthesized templates kept on disk between runs, keyed by all their inputs;
- `rule_targets`: the template's EventBridge rule targets played locally, with Lambda's
  asynchronous retry semantics.

Apart from `nodeheal.sim.local_aws` (which builds moto from these) so that the local AWS harness,
the seeded simulation and the fake API server's authorizer can all read the template without
importing one another.
"""
