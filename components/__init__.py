"""KFP components of kfp-spot (import namespace ``kfp_spot.components``)."""
