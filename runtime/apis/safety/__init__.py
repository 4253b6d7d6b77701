"""The safety API: moderations (`POST /v1/moderations`) and the guardrails Responses and chat run."""
