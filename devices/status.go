package devices

// Status is the devices part of the agent's /status (JSON).
type Status struct {
	// Drones are the registry's drones, by id.
	Drones []Drone `json:"drones"`
	// Registry are the registry's counters.
	Registry RegistryStats `json:"registry"`
	// Health is the last host sample; Sampler the sampler's counters.
	Health  *Sample       `json:"health,omitempty"`
	Sampler *SamplerStats `json:"sampler,omitempty"`
	// Disk is the disk-pressure state and counters.
	Disk *PressureStats `json:"disk,omitempty"`
}

// NewStatus snapshots the parts that run; any may be nil.
func NewStatus(r *Registry, s *Sampler, p *Pressure) Status {
	var st Status
	if r != nil {
		st.Drones = r.Snapshot()
		st.Registry = r.Stats()
	}
	if s != nil {
		if smp, ok := s.Latest(); ok {
			st.Health = &smp
		}
		ss := s.Stats()
		st.Sampler = &ss
	}
	if p != nil {
		ps := p.Stats()
		st.Disk = &ps
	}
	return st
}
