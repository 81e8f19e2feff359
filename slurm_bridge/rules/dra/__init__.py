"""DRA device requests: Slurm picks the devices, and the pod gets exactly those.

A managed pod asks for devices of a DRA DeviceClass through its extended resource
``deviceclass.resource.kubernetes.io/<class>``. The bridge maps the classes it knows to what Slurm
allocates (:data:`.classes.DEVICE_CLASSES`: a GPU class to the ``gpu`` GRES, ``dra.cpu`` to CPUs). Left as
it is, the request would let kube-scheduler's DRA plugin pick devices itself, which Slurm may
have given to another job. So the mutating webhook rewrites it (:func:`.admission.rewrite`): the extended
resource goes, the pod references a ResourceClaim the bridge will make (``spec.resourceClaims``
and the container's ``resources.claims``), and the request is kept in the annotation
``slinky.slurm.net/device-requests``. Once Slurm has allocated the job, the operator reads which
device indices it got on the pod's node (:class:`~slurm_bridge.slurm.models.NodeDevices`), finds
those devices in the node's ResourceSlices (:func:`.claims.plan_claim`), and creates the claim already
allocated to them and reserved for the pod before it releases the pod.

Device index mapping: a device's Slurm index is its ``index`` attribute (as the NVIDIA DRA driver
publishes it; for ``dra.cpu`` the CPU's number in Slurm's core order), or else its position among
the driver's devices on that node in natural name order (``gpu-2`` before ``gpu-10``).

Everything here is pure: callers pass the API objects as dicts.

The modules, one per reader: :mod:`.classes` (the classes the bridge maps and what Slurm allocates
for each), :mod:`.recorded` (what the webhook writes on the pod for the operator), :mod:`.admission`
(the webhook's reading and rewrite of a pod's request), :mod:`.userclaims` (claims made or named past
the bridge, refused at admission), :mod:`.gres` (what Slurm is asked for, and its GRES lists),
:mod:`.inventory` (a node's published devices in Slurm's order, shards included, and the node
inventory check), :mod:`.claims` (the claim the operator makes at release).
"""
