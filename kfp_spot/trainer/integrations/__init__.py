"""Framework integrations: preemption-safe checkpoints in your trainer with a few lines.

Each integration turns the preemption notice (SIGTERM) into a save at the next safe point, in the
framework's own format, committed atomically under a kfp-spot manifest; restores the newest
committed step on the next attempt; writes attempt records; and runs your ``on_preemption``
cleanup hooks after the save, inside the grace period left.

=========================================  ==================================================
module                                     for
=========================================  ==================================================
``...integrations.keras``                  Keras 3 ``model.fit``: :class:`SpotCheckpoint`
                                           callback (saves mid-epoch, resumes mid-epoch)
``...integrations.xgboost``                ``xgboost.train``: a ``TrainingCallback``, resume
                                           with the saved booster and the remaining rounds
``...integrations.huggingface``            ``transformers.Trainer``: a ``TrainerCallback``,
                                           ``resume_from_checkpoint`` = newest committed step
``...integrations.lightning``              PyTorch Lightning: a ``Callback``, ``ckpt_path``
``...integrations.directory``              anything that writes its own directory or file
                                           (orbax, torch DCP, a script): ``commit_directory``
                                           and ``latest_directory``
=========================================  ==================================================

Importing this package imports no framework; each module imports only its own.
"""
