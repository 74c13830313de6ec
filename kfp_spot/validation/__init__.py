"""A component's inputs as KFP hands them over: read, checked and refused in one line.

- :mod:`~kfp_spot.validation.component_inputs`: :class:`InputReader` (every component entry point
  reads its parameter inputs through it), :func:`check_input` (a rule of :mod:`kfp_spot.vertex`
  refusing a value becomes the component's own input error), :func:`inputs_of` (the same for the
  floor's :class:`~kfp_spot.vertex.values.InvalidFieldError`) and :func:`dataclass_defaults`.
- :mod:`~kfp_spot.validation.inputs`: :func:`report_input_errors` (a component's bad input ends its
  KFP task in one line, no traceback).

Vertex AI's own rules live in :mod:`kfp_spot.vertex`.
"""
