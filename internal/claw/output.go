package claw

import (
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
)

// outputFlags are kubectl's -o and --no-headers: json, yaml, name,
// jsonpath=…, go-template=… and the rest of cli-runtime's printers, and,
// for a command with a table, the table and -o wide.
type outputFlags struct {
	print     *genericclioptions.PrintFlags
	table     bool // the command prints a table without -o; wide is allowed
	noHeaders bool
}

// newOutputFlags makes the flags; table says the command has a table.
// -o name prints kind/name alone, as kubectl's does (no operation word).
func newOutputFlags(table bool) *outputFlags {
	return &outputFlags{print: genericclioptions.NewPrintFlags("").WithTypeSetter(Scheme()), table: table}
}

// formats are the -o values the command takes.
func (f *outputFlags) formats() []string {
	formats := f.print.AllowedFormats()
	if f.table {
		formats = append([]string{"wide"}, formats...)
	}
	return formats
}

func (f *outputFlags) addFlags(cmd *cobra.Command) {
	f.print.AddFlags(cmd)
	formats := f.formats()
	if f.table {
		cmd.Flags().BoolVar(&f.noHeaders, "no-headers", false, "print the table without its header line")
	}
	fl := cmd.Flags().Lookup("output")
	fl.Usage = "output format: " + strings.Join(formats, "|") + "; empty: " + map[bool]string{true: "the table", false: "a line for people"}[f.table]
	_ = cmd.RegisterFlagCompletionFunc("output", func(_ *cobra.Command, _ []string, prefix string) ([]string, cobra.ShellCompDirective) {
		var fit []string
		for _, f := range formats {
			if strings.HasPrefix(f, prefix) {
				fit = append(fit, f)
			}
		}
		return fit, cobra.ShellCompDirectiveNoFileComp
	})
}

// format is -o as given ("" when not).
func (f *outputFlags) format() string {
	if f.print.OutputFormat == nil {
		return ""
	}
	return *f.print.OutputFormat
}

// formatName is -o without its template: jsonpath for jsonpath={…}.
func (f *outputFlags) formatName() string {
	name, _, _ := strings.Cut(f.format(), "=")
	return name
}

// human reports whether the command prints its own view: no -o, or -o wide.
func (f *outputFlags) human() bool {
	o := f.format()
	return o == "" || (f.table && o == "wide")
}

// check refuses an -o no printer serves, before anything is sent.
func (f *outputFlags) check() error {
	if f.human() {
		return nil
	}
	if _, err := f.print.ToPrinter(); err != nil {
		allowed := f.formats()
		if !slices.Contains(allowed, f.formatName()) {
			return usageError("--output %q: want one of %s", f.format(), strings.Join(allowed, ", "))
		}
		return usageError("--output %s: %v", f.format(), err)
	}
	return nil
}

// printer is -o's printer; call it only when human() is false.
func (f *outputFlags) printer() (printers.ResourcePrinter, error) {
	p, err := f.print.ToPrinter()
	if err != nil {
		return nil, usageError("--output %s: %v", f.format(), err)
	}
	return p, nil
}

// printObject prints one object of a kind the Scheme knows with -o.
func (f *outputFlags) printObject(w io.Writer, obj runtime.Object) error {
	p, err := f.printer()
	if err != nil {
		return err
	}
	return p.PrintObj(obj, w)
}

// printList prints objects with -o as kubectl get does: a v1 List, even of
// one object or none (so that jsonpath's .items[*] always works), and for
// -o name a line for each.
func (f *outputFlags) printList(w io.Writer, objs []runtime.Object) error {
	p, err := f.printer()
	if err != nil {
		return err
	}
	scheme := Scheme()
	list := &metav1.List{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "List"}, Items: []runtime.RawExtension{}}
	for _, o := range objs {
		gvks, _, err := scheme.ObjectKinds(o)
		if err != nil {
			return err
		}
		o.GetObjectKind().SetGroupVersionKind(gvks[0])
		list.Items = append(list.Items, runtime.RawExtension{Object: o})
	}
	if f.formatName() != "name" {
		return p.PrintObj(list, w)
	}
	for _, item := range list.Items {
		if err := p.PrintObj(item.Object, w); err != nil {
			return err
		}
	}
	return nil
}

// printTable prints a table through cli-runtime's table printer: kubectl's layout,
// the columns of Priority 1 only with -o wide, NAMESPACE first with
// allNamespaces (each row's Object names its namespace).
func (f *outputFlags) printTable(w io.Writer, t *metav1.Table, allNamespaces bool) error {
	p := printers.NewTablePrinter(printers.PrintOptions{
		Wide: f.format() == "wide", NoHeaders: f.noHeaders, WithNamespace: allNamespaces,
	})
	return p.PrintObj(t, w)
}
