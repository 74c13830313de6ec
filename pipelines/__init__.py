"""KFP pipelines of kfp-spot (import namespace ``kfp_spot.pipelines``)."""
